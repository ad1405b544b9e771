"""Bad input from a user: a one-line error that says what is wrong, a non-zero exit, and
nothing written (no project row, no workspace repository, no event).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.support.bad_input import assert_one_line_error, coordinator_state
from tests.support.stack import ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def coordinator(
    database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("bad-input")
    stack = Stack(log_dir=logs, script=ROOT_DIR / "examples/scripts/hello.json").start(workers=0)
    yield stack
    stack.stop()


def test_directory_without_prompt_is_refused_and_nothing_is_written(
    coordinator: Stack, tmp_path: Path
) -> None:
    before = coordinator_state(coordinator)
    (tmp_path / "main.py").write_text("print(1)\n")
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(result, "PROMPT.md")
    assert coordinator_state(coordinator) == before


def test_invalid_raas_toml_names_the_bad_key_and_nothing_is_written(
    coordinator: Stack, tmp_path: Path
) -> None:
    before = coordinator_state(coordinator)
    (tmp_path / "PROMPT.md").write_text("do it\n")
    (tmp_path / "raas.toml").write_text('[sandbox]\nmemory = "lots"\n')
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(result, "sandbox.memory", "not a size")
    (tmp_path / "raas.toml").write_text('max_iterations = "many"\n')
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(result, "max_iterations", "integer")
    assert coordinator_state(coordinator) == before


def test_a_budget_too_small_for_one_call_is_refused_with_the_smallest_that_works(
    coordinator: Stack, tmp_path: Path
) -> None:
    # Given a project whose limit cannot pay a single floor-sized call of its model
    before = coordinator_state(coordinator)
    (tmp_path / "PROMPT.md").write_text("do it\n")
    (tmp_path / "raas.toml").write_text('model = "claude-sonnet-4-6"\n[budget]\nlimit_usd = 0.01\n')
    # When it is submitted, it is refused in one line naming the smallest limit for that model
    # (4,000 tokens in at the cache-write price $3.75 and 1,024 out at $15 per million)
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(
        result, "limit_usd = 0.01", "claude-sonnet-4-6", "smallest limit that works is 0.03036"
    )
    # And nothing was created
    assert coordinator_state(coordinator) == before


def test_invalid_upload_is_refused_by_the_api_itself(coordinator: Stack, tmp_path: Path) -> None:
    # The coordinator does not trust the CLI's checks: a raw upload gets the same answer.
    before = coordinator_state(coordinator)
    url = f"http://127.0.0.1:{coordinator.coordinator_port}/v1/projects"
    headers = {"Authorization": f"Bearer {coordinator.env['RAAS_API_TOKEN']}"}
    response = httpx.post(url, content=b"not a tarball", headers=headers, timeout=10)
    assert response.status_code == 422
    assert "tar.gz" in response.json()["detail"]
    assert coordinator_state(coordinator) == before


def test_wrong_token_is_refused_and_nothing_is_written(coordinator: Stack) -> None:
    before = coordinator_state(coordinator)
    coordinator.env["RAAS_API_TOKEN"], token = "wrong", coordinator.env["RAAS_API_TOKEN"]
    try:
        result = coordinator.cli("submit", str(ROOT_DIR / "examples/hello"))
    finally:
        coordinator.env["RAAS_API_TOKEN"] = token
    assert_one_line_error(result, "API token")
    assert coordinator_state(coordinator) == before


def test_unknown_project_id_is_a_clear_error(coordinator: Stack) -> None:
    for command in (["status", "nosuchproject"], ["follow", "nosuchproject"]):
        result = coordinator.cli(*command)
        assert_one_line_error(result, "no project 'nosuchproject'")


def test_unreachable_coordinator_is_a_clear_error(coordinator: Stack) -> None:
    coordinator.env["RAAS_COORDINATOR_URL"], url = (
        "http://127.0.0.1:9",
        coordinator.env["RAAS_COORDINATOR_URL"],
    )
    try:
        result = coordinator.cli("status", "anything")
    finally:
        coordinator.env["RAAS_COORDINATOR_URL"] = url
    assert_one_line_error(result, "does not answer")


def _api_detail(stack: Stack, method: str, path: str, **kwargs: object) -> tuple[int, str]:
    url = f"http://127.0.0.1:{stack.coordinator_port}{path}"
    headers = {"Authorization": f"Bearer {stack.env['RAAS_API_TOKEN']}"}
    response = httpx.request(method, url, headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]
    return response.status_code, response.json()["detail"]


@pytest.mark.parametrize(
    ("toml", "fragments"),
    [
        (
            '[[tasks]]\nid = "a"\ntitle = "a"\ndepends_on = ["b"]\n[[tasks]]\nid = "b"\ntitle = "b"\n'
            'depends_on = ["a"]\n',
            ["cycle", "a -> b -> a"],
        ),
        ('[[tasks]]\nid = "a"\ntitle = "a"\ndepends_on = ["zz"]\n', ["depends on unknown task 'zz'"]),
        ('[[tasks]]\nid = "a"\ntitle = "a"\ncategory = "wizard"\n', ["unknown category 'wizard'"]),
        ('workflow = "waterfall"\n', ["workflow", "waterfall"]),
    ],
)
def test_bad_task_graph_or_workflow_is_refused_by_cli_and_api_alike(
    coordinator: Stack, tmp_path: Path, toml: str, fragments: list[str]
) -> None:
    before = coordinator_state(coordinator)
    (tmp_path / "PROMPT.md").write_text("do it\n")
    (tmp_path / "raas.toml").write_text(toml)
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(result, *fragments)
    from shared.archive import pack_directory

    status, detail = _api_detail(coordinator, "POST", "/v1/projects", content=pack_directory(tmp_path))
    assert status == 422
    assert result.stderr.strip() == f"error: {detail}"
    assert coordinator_state(coordinator) == before


def test_negative_budget_resume_of_a_completed_project_and_pause_of_a_missing_one(coordinator: Stack) -> None:
    # Given a project that has completed
    created = coordinator.cli("submit", str(ROOT_DIR / "examples/hello"), "--no-start", "--json")
    assert created.returncode == 0, created.stderr
    project_id = json.loads(created.stdout)["id"]
    with session_scope() as session:
        session.get_one(Project, project_id).status = ProjectStatus.COMPLETED
    before = coordinator_state(coordinator)

    cases = [
        (["budget", project_id, "--limit", "-5"], "not a positive amount"),
        (["resume", project_id], "is completed; only a paused project can be resumed"),
        (["pause", "nosuchproject"], "no project 'nosuchproject'"),
    ]
    for args, fragment in cases:
        assert_one_line_error(coordinator.cli(*args), fragment)
    assert (
        _api_detail(coordinator, "PUT", f"/v1/projects/{project_id}/budget", json={"limit_usd": "-5"})[0]
        == 422
    )
    status, detail = _api_detail(coordinator, "POST", f"/v1/projects/{project_id}/resume")
    assert status == 409
    assert "only a paused project can be resumed" in detail
    assert _api_detail(coordinator, "POST", "/v1/projects/nosuchproject/pause")[0] == 404
    assert coordinator_state(coordinator) == before
