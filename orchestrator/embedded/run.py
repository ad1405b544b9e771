"""``raas run DIR``: check everything, run the project in the embedded engine, say how it ended.

Every check (the project directory, its harnesses' binaries, the Claude key, git, a sandbox, the
data directory) comes before anything is written, so bad input leaves no database, workspace or
project behind.

It returns how the project ended, which ``raas run`` turns into its exit code
(``orchestrator.cli.exit_codes``); Ctrl-C (or SIGTERM) stops the project, says how it ended,
and is raised again.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import tempfile
import typing
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rich.console import Console
from sqlalchemy import select

from orchestrator.embedded.engine import EmbeddedEngine, embedded_settings, prepare_data_dir
from orchestrator.embedded.live import RunView
from orchestrator.queries import projects
from orchestrator.scheduling import submission, workspace
from orchestrator.scheduling.prompt import PROMPT_FILE
from orchestrator.workspaces import get_store
from shared.archive import pack_directory, pack_files
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.harnesses import check_binaries
from shared.models import Delivery, DeliveryStatus, PauseReason, ProjectStatus
from shared.project_config import ProjectConfig
from shared.settings import Settings
from workers.llm import client as llm
from workers.runners.cli.runner import check_host_run
from workers.sandbox.choice import SandboxChoice, SandboxKind, choose_sandbox

log = logging.getLogger(__name__)
SANDBOX_KINDS = typing.get_args(SandboxKind)
# How long a finished run waits for its deliveries (pushes, the pull request) before it exits.
DELIVERY_WAIT_S = 120.0
# Why the scheduler paused -> what to call it and what the user can do.
PAUSES = {
    PauseReason.BUDGET_EXCEEDED: ("budget", "raise [budget] limit_usd in raas.toml to let it go further"),
    PauseReason.CIRCUIT_BREAKER: ("circuit breaker", ""),
    PauseReason.API_KEY_REQUIRED: ("API key", "check ANTHROPIC_API_KEY"),
}


@dataclass(frozen=True)
class CheckedRun:
    """What the checks established; nothing has been written yet."""

    directory: Path
    archive: Path
    settings: Settings
    config: ProjectConfig
    sandbox: SandboxChoice


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop the project cleanly, then end the run.

    A control-flow signal, not an error: `raas run` catches it and exits 143.
    """


def _terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


def check(directory: Path, sandbox: str | None, tmp: Path) -> CheckedRun:
    """Everything that could stop the run, checked in order; the first problem raises.

    Raises:
        InvalidInput, SandboxStartError: one line saying what is wrong and what to do.
    """
    if sandbox is not None and sandbox not in SANDBOX_KINDS:
        msg = f"sandbox {sandbox!r}: use one of {', '.join(SANDBOX_KINDS)}"
        raise InvalidInput(msg)
    settings = embedded_settings()
    if not directory.is_dir():
        msg = f"{directory} is not a directory; pass a project directory (`raas init DIR` makes one)"
        raise InvalidInput(msg)
    _, config = submission.read_project_files(directory)
    check_binaries(config.harnesses_in_use(), settings.harness_cache)
    archive = tmp / "project.tar.gz"
    if config.source.repo:
        # The workspace is the repository's branch: the directory gives the prompt and settings only.
        service = [name for name in (PROMPT_FILE, submission.CONFIG_FILE) if (directory / name).is_file()]
        archive.write_bytes(
            pack_files({name: (directory / name).read_text(encoding="utf-8") for name in service})
        )
    else:
        archive.write_bytes(pack_directory(directory))
    workspace.unpack_upload(archive, tmp / "check")  # what create_project will refuse, refused now
    llm.make_client(settings).close()
    if shutil.which("git") is None:
        msg = "git is not installed; the workspace is a git repository, install git"
        raise InvalidInput(msg)
    kind = typing.cast(SandboxKind, sandbox or settings.sandbox)
    choice = choose_sandbox(kind, settings.sandbox_image)
    warning = check_host_run(config.harnesses_in_use(), choice.kind == "local", settings.harness_on_host)
    if warning is not None:
        choice = SandboxChoice(choice.config, f"{choice.notice}\n{warning}" if choice.notice else warning)
    prepare_data_dir(settings)
    return CheckedRun(directory, archive, settings, config, choice)


def run_directory(directory: Path, sandbox: str | None = None, ui_port: int | None = None) -> ProjectStatus:
    """Run the project in ``directory`` to its end; return how it ended. With ``ui_port``, the
    dashboard is served on 127.0.0.1 at that port (0: any free one) while it runs.

    Raises:
        KeyboardInterrupt: Ctrl-C (``Terminated``: SIGTERM), once the project has stopped.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="raas-run-") as tmp:
        checked = check(directory, sandbox, Path(tmp))
        if checked.sandbox.notice:
            sys.stderr.write(checked.sandbox.notice + "\n")
            sys.stderr.flush()
        console = Console(highlight=False)
        view = RunView(
            console, live=console.is_terminal, sandbox=checked.sandbox.describe(), config=checked.config
        )
        previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            with EmbeddedEngine(checked.settings, checked.sandbox, view, ui_port=ui_port) as engine:
                if engine.ui_url:
                    _announce_ui(engine)
                return _run(engine, view, checked)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _announce_ui(engine: EmbeddedEngine) -> None:
    """Where the dashboard is, and the token this run made for it (only this terminal sees it)."""
    token = engine.settings.api_token.get_secret_value()
    sys.stderr.write(f"dashboard: {engine.ui_url}/ (sign in with this run's token: {token})\n")
    sys.stderr.flush()


def _run(engine: EmbeddedEngine, view: RunView, checked: CheckedRun) -> ProjectStatus:
    project_id: str | None = None
    try:
        project_id = engine.create(checked.directory, checked.archive).id
        with view.showing(project_id):
            engine.begin(project_id)
            engine.wait(project_id)
    except KeyboardInterrupt:
        if project_id is not None:
            _stop(engine, project_id)
            _report(checked, project_id)
        raise
    _finish_deliveries(engine, checked, project_id)
    return _report(checked, project_id)


def _finish_deliveries(engine: EmbeddedEngine, checked: CheckedRun, project_id: str) -> None:
    """Wait (bounded) for the run's deliveries: nothing retries them once this process exits, so
    one left pending or failed is said on stderr, with how to push the branch by hand."""
    engine.dispatcher.wait_deliveries(DELIVERY_WAIT_S)
    repo = get_store(checked.settings).read(project_id)
    with session_scope() as session:
        undone = session.execute(
            select(Delivery.branch, Delivery.remote, Delivery.status, Delivery.error).where(
                Delivery.project_id == project_id, Delivery.status != DeliveryStatus.DELIVERED
            )
        ).all()
    for branch, remote, status, error in undone:
        what = (
            f"still pending after {DELIVERY_WAIT_S:.0f} s, left undone"
            if status == DeliveryStatus.PENDING
            else f"failed: {error}"
        )
        sys.stderr.write(
            f"delivery of {branch}: {what}; push it yourself: "
            f"git -C {repo} push {remote} main:refs/heads/{branch}\n"
        )
    sys.stderr.flush()


def _stop(engine: EmbeddedEngine, project_id: str) -> None:
    sys.stderr.write("stopping: the current step ends first (interrupt again to quit at once)\n")
    sys.stderr.flush()
    try:
        engine.stop(project_id)
        engine.wait(project_id)
    except KeyboardInterrupt:
        removed = engine.remove_sandboxes(project_id)
        sys.stderr.write(f"quit without waiting; removed {len(removed)} sandbox container(s)\n")


def _report(checked: CheckedRun, project_id: str) -> ProjectStatus:
    """Print how the project ended (stdout) and return its status."""
    detail = projects.project_detail(project_id)
    iterations = sum(1 for it in detail.iterations if it.status.is_finished)
    totals = (
        f"{iterations} iteration(s), {detail.input_tokens:,} tokens in / {detail.output_tokens:,} out, "
        f"${detail.spent_usd:.4f} of ${detail.budget_limit_usd:.2f}"
    )
    summaries = [it.summary for it in detail.iterations if it.completed_task and it.summary]
    reason = detail.status_reason or (summaries[-1] if summaries else "")
    if detail.status == ProjectStatus.PAUSED:
        line = _paused_line(detail.pause_reason, detail.status_reason)
    else:
        line = f"{detail.status.value}: {detail.name}" + (f": {reason}" if reason else "")
    repo = get_store(checked.settings).read(project_id)
    sys.stdout.write(f"{line}\n  project {project_id}: {totals}\n  workspace: git clone {repo}\n")
    sys.stdout.flush()
    return detail.status


def _paused_line(reason: PauseReason | None, message: str | None) -> str:
    """``paused (budget): spent $… of $…; what to do``: the pause's words, named by its reason."""
    what, hint = PAUSES.get(reason, (reason.value, "")) if reason else ("paused", "")
    return f"paused ({what}): {message or ''}" + (f"; {hint}" if hint else "")
