"""One runner interface: every harness name builds its runner from one table, and so does the
validator's check; building starts nothing (no sandbox, no gateway lease) before ``run``."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from shared.event_payloads import ToolExecuted
from shared.events import EventData
from shared.harnesses import HarnessName
from shared.project_config import parse_project_config
from shared.settings import Settings
from workers.claim import Claim
from workers.runners.api import ApiRunner
from workers.runners.base import Runner
from workers.runners.build import RUNNERS, Lent, build_runner, recipe_for
from workers.runners.check import CheckRunner
from workers.runners.cli.runner import CliRunner, LlmLease
from workers.sandbox.base import ExecResult, Sandbox
from workers.sandbox.container import SandboxMounts

pytestmark = pytest.mark.unit
HARNESS_NAMES: tuple[HarnessName, ...] = get_args(HarnessName)


def _claim(raas_toml: str, category: str = "builder") -> Claim:
    return Claim(
        project_id="p1",
        iteration_id="i1",
        agent_id="a1",
        number=1,
        attempt=1,
        project_name="demo",
        prompt="Build it.",
        task_title="Build it",
        task_description="",
        config=parse_project_config(raas_toml),
        memory_bank="p1",
        category=category,
    )


def _never_started(mounts: SandboxMounts | None) -> Sandbox:
    msg = "a sandbox was started while the runner was being built"
    raise AssertionError(msg)


def _never_leased(claim: Claim, emit: object) -> LlmLease:
    msg = "a gateway lease was opened while the runner was being built"
    raise AssertionError(msg)


def _lent(
    tmp_path: Path, start_sandbox: object = _never_started, emitted: list[EventData] | None = None
) -> Lent:
    return Lent(
        settings=Settings(harness_cache=tmp_path),
        workdir=tmp_path,
        start_sandbox=start_sandbox,  # type: ignore[arg-type]
        emit=(emitted if emitted is not None else []).append,
        publish=lambda event: None,
        open_lease=_never_leased,
    )


def test_the_table_has_a_runner_for_every_harness_name_and_nothing_else() -> None:
    assert set(RUNNERS) == set(HARNESS_NAMES)


@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_every_harness_name_builds_its_runner_without_starting_anything(name: str, tmp_path: Path) -> None:
    # Given a builder on that harness
    claim = _claim(f'harness = "{name}"')
    # When its runner is built
    runner = build_runner(claim, _lent(tmp_path))
    # Then it is a Runner of the harness, and nothing ran yet (the fakes raise if called)
    assert isinstance(runner, Runner)
    if name == "api":
        assert isinstance(runner, ApiRunner)
    else:
        assert isinstance(runner, CliRunner)
        assert runner.cli.name == name


def test_only_the_api_harness_can_take_a_warm_sandbox() -> None:
    # An agent CLI's container is made with its mounts (binary, socket): a warm one cannot serve.
    assert {name for name, recipe in RUNNERS.items() if recipe.warm_sandbox} == {"api"}


def test_a_validator_with_a_check_command_builds_the_check_runner(tmp_path: Path) -> None:
    claim = _claim('workflow = "pipeline"\ncheck_command = "make test"', category="validator")
    runner = build_runner(claim, _lent(tmp_path))
    assert isinstance(runner, CheckRunner)
    assert isinstance(runner, Runner)
    assert runner.command == "make test"
    assert recipe_for(claim).warm_sandbox


def test_a_validator_without_a_check_command_runs_on_the_api_loop(tmp_path: Path) -> None:
    claim = _claim('harness = "codex"', category="validator")
    assert isinstance(build_runner(claim, _lent(tmp_path)), ApiRunner)


class _Sandbox:
    def __init__(self, result: ExecResult) -> None:
        self.result, self.commands, self.closed = result, list[str](), False

    def run(self, command: str) -> ExecResult:
        self.commands.append(command)
        return self.result

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("result", "passed"),
    [
        (ExecResult(exit_code=0, output="ok"), True),
        (ExecResult(exit_code=1, output="1 failed"), False),
        (ExecResult(exit_code=None, output="slow", timed_out=True), False),
    ],
)
def test_the_check_runner_passes_on_exit_0_only_and_says_what_the_command_printed(
    tmp_path: Path, result: ExecResult, passed: bool
) -> None:
    # Given a validator whose check command is run in a plain sandbox
    sandbox = _Sandbox(result)
    emitted: list[EventData] = []
    starts: list[SandboxMounts | None] = []

    def start(mounts: SandboxMounts | None) -> _Sandbox:
        starts.append(mounts)
        return sandbox

    claim = _claim('workflow = "pipeline"\ncheck_command = "make test"', category="validator")
    # When it runs
    end = build_runner(claim, _lent(tmp_path, start, emitted)).run()
    # Then it ran the command in a plain sandbox, closed it, and its end says how it went
    assert starts == [None]
    assert sandbox.commands == ["make test"]
    assert sandbox.closed
    assert end.completed is passed
    assert end.summary is not None
    assert end.summary.startswith(f"`make test` exited with {result.exit_code}")
    assert result.output in end.summary
    [event] = emitted
    assert isinstance(event, ToolExecuted)
    assert (event.tool, event.is_error, event.exit_code) == ("check", not passed, result.exit_code)
