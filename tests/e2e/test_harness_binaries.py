"""A harness whose pinned binary is missing or of another version is bad input wherever it is
asked for (issue #12 point 2): ``raas worker --harnesses``, ``raas submit`` to the coordinator and
``raas run``. Each answers one line naming the setup command, exits non-zero and writes nothing.

The harness cache is a temporary directory: Claude Code absent, Codex a shell script that prints
another version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from shared.db import session_scope
from shared.harnesses import HARNESSES
from shared.models import Event, Project
from tests.support.stack import RAAS, ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]

CODEX_TOML = 'harness = "codex"\n'
CLAUDE_TOML = '[categories.builder]\nharness = "claude-code"\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("harness-cache")
    codex = HARNESSES["codex"].path_in(root)
    codex.parent.mkdir(parents=True)
    codex.write_text("#!/bin/sh\necho 'codex-cli 0.1.0'\n")
    codex.chmod(0o755)
    return root


@pytest.fixture(scope="module")
def coordinator(
    database_url: str, redis_url: str, cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("harness-binaries")
    stack = Stack(
        log_dir=logs, script=ROOT_DIR / "examples/scripts/hello.json", env={"RAAS_HARNESS_CACHE": str(cache)}
    ).start(workers=0)
    yield stack
    stack.stop()


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAAS_", "ANTHROPIC_"))}
    return {**env, "RAAS_HARNESS_CACHE": str(cache), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **extra}


def _raas(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RAAS, *args], env=env, capture_output=True, text=True, timeout=120)


def _assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    stderr = result.stderr.strip()
    assert result.returncode != 0, result.stdout
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in stderr


def _project_dir(tmp_path: Path, raas_toml: str) -> Path:
    project = tmp_path / "hello"
    shutil.copytree(ROOT_DIR / "examples/hello", project)
    (project / "raas.toml").write_text(raas_toml)
    return project


MISSING = ("harness claude-code", "2.1.330 is not installed", "bash scripts/setup.sh")
WRONG = (
    "harness codex: wrong version",
    "found 'codex-cli 0.1.0'",
    "want 'codex-cli 0.169.0'",
    "bash scripts/setup.sh",
)


def test_a_worker_refuses_to_start_without_a_harness_it_must_run(cache: Path, tmp_path: Path) -> None:
    env = _env(cache, RAAS_DATA_DIR=str(tmp_path / "data"))

    _assert_one_line_error(_raas("worker", "--harnesses", "claude-code", env=env), *MISSING)
    _assert_one_line_error(_raas("worker", env={**env, "RAAS_WORKER_HARNESSES": '["codex"]'}), *WRONG)
    _assert_one_line_error(
        _raas("worker", "--harnesses", "api,aider", env=env),
        "unknown harness 'aider'",
        "api, claude-code, codex, opencode",
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("raas_toml", "fragments"), [(CLAUDE_TOML, MISSING), (CODEX_TOML, WRONG)])
def test_raas_run_refuses_a_harness_it_cannot_run_before_writing_anything(
    cache: Path, tmp_path: Path, raas_toml: str, fragments: tuple[str, ...]
) -> None:
    data_dir = tmp_path / "data"
    result = _raas(
        "run", str(_project_dir(tmp_path, raas_toml)), env=_env(cache, RAAS_DATA_DIR=str(data_dir))
    )

    _assert_one_line_error(result, *fragments)
    assert not data_dir.exists()


def _state(stack: Stack) -> tuple[int, int, list[str]]:
    with session_scope() as session:
        projects = session.scalar(select(func.count()).select_from(Project)) or 0
        events = session.scalar(select(func.count()).select_from(Event)) or 0
    workspaces = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces"
    return projects, events, sorted(p.name for p in workspaces.iterdir()) if workspaces.exists() else []


@pytest.mark.parametrize(("raas_toml", "fragments"), [(CLAUDE_TOML, MISSING), (CODEX_TOML, WRONG)])
def test_the_coordinator_refuses_a_harness_it_cannot_run_before_writing_anything(
    coordinator: Stack, tmp_path: Path, raas_toml: str, fragments: tuple[str, ...]
) -> None:
    before = _state(coordinator)

    result = coordinator.cli("submit", str(_project_dir(tmp_path, raas_toml)))

    _assert_one_line_error(result, *fragments)
    assert _state(coordinator) == before
