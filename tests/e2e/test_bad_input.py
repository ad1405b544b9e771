"""Bad input from a user: a one-line error that says what is wrong, a non-zero exit, and
nothing written (no project row, no workspace repository, no event).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Event, Project
from tests.stack import ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def coordinator(
    database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("bad-input")
    stack = Stack(log_dir=logs, script=ROOT_DIR / "examples/scripts/hello.json").start(workers=0)
    yield stack
    stack.stop()


def _state(stack: Stack) -> tuple[int, int, list[str]]:
    with session_scope() as session:
        projects = session.scalar(select(func.count()).select_from(Project)) or 0
        events = session.scalar(select(func.count()).select_from(Event)) or 0
    workspaces = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces"
    return projects, events, sorted(p.name for p in workspaces.iterdir()) if workspaces.exists() else []


def _assert_one_line_error(result: object, *fragments: str) -> None:
    stderr = result.stderr.strip()  # type: ignore[attr-defined]
    assert result.returncode != 0  # type: ignore[attr-defined]
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in stderr


def test_directory_without_prompt_is_refused_and_nothing_is_written(
    coordinator: Stack, tmp_path: Path
) -> None:
    before = _state(coordinator)
    (tmp_path / "main.py").write_text("print(1)\n")
    result = coordinator.cli("submit", str(tmp_path))
    _assert_one_line_error(result, "PROMPT.md")
    assert _state(coordinator) == before


def test_invalid_raas_toml_names_the_bad_key_and_nothing_is_written(
    coordinator: Stack, tmp_path: Path
) -> None:
    before = _state(coordinator)
    (tmp_path / "PROMPT.md").write_text("do it\n")
    (tmp_path / "raas.toml").write_text('[sandbox]\nmemory = "lots"\n')
    result = coordinator.cli("submit", str(tmp_path))
    _assert_one_line_error(result, "sandbox.memory", "not a size")
    (tmp_path / "raas.toml").write_text('max_iterations = "many"\n')
    result = coordinator.cli("submit", str(tmp_path))
    _assert_one_line_error(result, "max_iterations", "integer")
    assert _state(coordinator) == before


def test_invalid_upload_is_refused_by_the_api_itself(coordinator: Stack, tmp_path: Path) -> None:
    # The coordinator does not trust the CLI's checks: a raw upload gets the same answer.
    before = _state(coordinator)
    url = f"http://127.0.0.1:{coordinator.coordinator_port}/v1/projects"
    headers = {"Authorization": f"Bearer {coordinator.env['RAAS_API_TOKEN']}"}
    response = httpx.post(url, content=b"not a tarball", headers=headers, timeout=10)
    assert response.status_code == 422
    assert "tar.gz" in response.json()["detail"]
    assert _state(coordinator) == before


def test_wrong_token_is_refused_and_nothing_is_written(coordinator: Stack) -> None:
    before = _state(coordinator)
    coordinator.env["RAAS_API_TOKEN"], token = "wrong", coordinator.env["RAAS_API_TOKEN"]
    try:
        result = coordinator.cli("submit", str(ROOT_DIR / "examples/hello"))
    finally:
        coordinator.env["RAAS_API_TOKEN"] = token
    _assert_one_line_error(result, "API token")
    assert _state(coordinator) == before


def test_unknown_project_id_is_a_clear_error(coordinator: Stack) -> None:
    for command in (["status", "nosuchproject"], ["follow", "nosuchproject"]):
        result = coordinator.cli(*command)
        _assert_one_line_error(result, "no project 'nosuchproject'")


def test_unreachable_coordinator_is_a_clear_error(coordinator: Stack) -> None:
    coordinator.env["RAAS_COORDINATOR_URL"], url = (
        "http://127.0.0.1:9",
        coordinator.env["RAAS_COORDINATOR_URL"],
    )
    try:
        result = coordinator.cli("status", "anything")
    finally:
        coordinator.env["RAAS_COORDINATOR_URL"] = url
    _assert_one_line_error(result, "does not answer")
