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

from shared.harnesses import HARNESSES
from tests.support.bad_input import assert_one_line_error, coordinator_state
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

    assert_one_line_error(_raas("worker", "--harnesses", "claude-code", env=env), *MISSING)
    assert_one_line_error(_raas("worker", env={**env, "RAAS_WORKER_HARNESSES": '["codex"]'}), *WRONG)
    assert_one_line_error(
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

    assert_one_line_error(result, *fragments)
    assert not data_dir.exists()


@pytest.mark.parametrize(("raas_toml", "fragments"), [(CLAUDE_TOML, MISSING), (CODEX_TOML, WRONG)])
def test_the_coordinator_refuses_a_harness_it_cannot_run_before_writing_anything(
    coordinator: Stack, tmp_path: Path, raas_toml: str, fragments: tuple[str, ...]
) -> None:
    before = coordinator_state(coordinator)

    result = coordinator.cli("submit", str(_project_dir(tmp_path, raas_toml)))

    assert_one_line_error(result, *fragments)
    assert coordinator_state(coordinator) == before
