"""What every runner is: the :class:`Runner` protocol and the end of a run it returns or raises.

A runner runs one iteration's agent, whatever runs it (the built-in loop, an agent CLI, the
validator's check command), and ends in a :class:`RunResult` or a :class:`RunFailure`; the
iteration runner records either as the iteration's end. It is built, ready to run, by
:func:`workers.runners.build.build_runner` from the iteration's claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from shared.events import EventData
from shared.models import ErrorKind
from shared.schemas import EventOut
from workers.sandbox.base import Sandbox
from workers.sandbox.container import SandboxMounts

#: Where a runner's events go (the project's event stream, as this iteration's).
Emit = Callable[[EventData], None]
#: Publishes an event a tool already recorded in its own transaction (a memory write, a message).
Publish = Callable[[EventOut], None]
#: The iteration's sandbox, started on the runner's demand: with ``None`` a plain one (a warm one
#: from the pool when the iteration holds one), with mounts one made for them (an agent CLI's).
StartSandbox = Callable[[SandboxMounts | None], Sandbox]


class RunFailure(Exception):
    """The run cannot go on; ``kind`` tells the coordinator what to do about it.

    A control-flow signal between a runner and the iteration runner, which records it as the
    iteration's end (its error and error kind); it never reaches a user as an exception. It lives
    here, beside the runners that raise it, not in :mod:`shared.errors`: nothing outside
    ``workers`` catches it.
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class RunResult:
    """How a run ended when nothing failed: whether the task is complete, and its summary (a
    completion's, a subagent's report, a check's output)."""

    completed: bool = False
    summary: str | None = None
    turns: int = 0


@runtime_checkable
class Runner(Protocol):
    """One iteration's agent run, built with all it needs; ``run`` is called once.

    Raises:
        RunFailure: the run ended in a failure the coordinator acts on (its kind).
    """

    def run(self) -> RunResult: ...
