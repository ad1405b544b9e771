"""How a harness run ended, and what that means for the iteration (issue #12 point 5).

An agent CLI's own verdict is not taken at its word: Claude Code reports an API failure as
``subtype: "success"`` with ``is_error: true`` and exit 1, so a run is judged by its
``is_error``, its terminal reason and its exit code together, and by what the gateway saw (a
spent budget, a rejected key), which no CLI reports faithfully. The outcomes are every
runner's: a :class:`~workers.runners.base.RunResult`, or a
:class:`~workers.runners.base.RunFailure` whose kind the coordinator acts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.models import ErrorKind
from workers.runners.base import RunFailure, RunResult

SUMMARY_CHARS = 2000
AUTH_STATUSES = (401, 403)


@dataclass
class RunEnd:
    """The last word of a run, as its parser read it (None fields: the CLI did not say)."""

    is_error: bool = False
    #: Why it stopped, normalised: "completed", "max_turns", "api_error", or the CLI's own word.
    reason: str | None = None
    #: The final text of the agent (where a completion marker is looked for).
    text: str = ""
    error: str | None = None
    api_status: int | None = None
    turns: int = 0


class GatewayVerdict(Protocol):
    """What the iteration's LLM gateway saw (its lease's ``stats()``)."""

    @property
    def budget_exhausted(self) -> bool: ...

    @property
    def auth_failed(self) -> bool: ...

    @property
    def project_stopped(self) -> bool: ...

    @property
    def max_turns_reached(self) -> bool: ...

    @property
    def last_error(self) -> str | None: ...


@dataclass
class Finished:
    """The process side of a run: its exit, whether it was killed at the deadline, its stderr."""

    harness: str
    exit_code: int | None
    timed_out: bool
    timeout_s: float
    stderr_tail: str


def judge(
    end: RunEnd | None,
    finished: Finished,
    gateway: GatewayVerdict,
    marker: str | None,
    completion_note: str | None,
) -> RunResult:
    """The iteration's result, or raise the failure the coordinator must act on.

    ``completion_note`` is what the agent wrote to the completion file (None: it wrote none).

    Raises:
        RunFailure: BUDGET (the gateway refused a call: the project pauses budget_exceeded),
            API_KEY (the key was rejected), INTERNAL (killed at the deadline, or a crash: the
            message carries the last lines of stderr), LLM (the run ended on a model error).
    """
    name = finished.harness
    if gateway.budget_exhausted:
        msg = "the project's budget is spent; raise it with `raas budget ID --limit USD`"
        raise RunFailure(ErrorKind.BUDGET, msg)
    if gateway.auth_failed or (end is not None and end.api_status in AUTH_STATUSES):
        detail = gateway.last_error or (end.error if end else None) or "authentication failed"
        msg = f"the API key was rejected: {detail}"
        raise RunFailure(ErrorKind.API_KEY, msg)
    if gateway.project_stopped:
        return RunResult(completed=False, summary=_summary(end.text) if end else None)  # paused
    if gateway.max_turns_reached or (end is not None and end.reason == "max_turns"):
        # The turn cap (the CLI's own, or the gateway's for every CLI) ends this iteration, not
        # the task: the loop goes on from what it wrote.
        text = end.text if end is not None else ""
        return RunResult(completed=False, summary=_summary(text), turns=end.turns if end else 0)
    if finished.timed_out:
        msg = f"{name} ran past the iteration's {finished.timeout_s:.0f} s limit and was killed"
        raise RunFailure(ErrorKind.INTERNAL, msg)
    if end is None:
        msg = f"{name} exited with {finished.exit_code} without a result{_stderr(finished)}"
        raise RunFailure(ErrorKind.INTERNAL, msg)
    if end.is_error or finished.exit_code != 0:
        detail = end.error or end.text or end.reason or "an error"
        msg = f"{name} ended on {detail[:500]} (exit {finished.exit_code}){_stderr(finished)}"
        raise RunFailure(ErrorKind.LLM, msg)
    if completion_note is not None:
        return RunResult(
            completed=True, summary=_summary(completion_note) or _summary(end.text), turns=end.turns
        )
    if marker and marker in end.text:
        return RunResult(completed=True, summary=end.text[-500:], turns=end.turns)
    return RunResult(completed=False, summary=_summary(end.text), turns=end.turns)


def _summary(text: str) -> str | None:
    return text.strip()[-SUMMARY_CHARS:] or None


def _stderr(finished: Finished) -> str:
    return f"; its stderr ends:\n{finished.stderr_tail}" if finished.stderr_tail else ""
