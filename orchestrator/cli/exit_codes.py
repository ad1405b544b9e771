"""How ``raas`` exits, in one table: scripts branch on these numbers.

``raas run`` and ``raas follow`` exit with how the project ended; every command exits 1 with one
``error:`` line when it cannot do what it was asked. The README lists the same numbers.
"""

from __future__ import annotations

from enum import IntEnum

from shared.models import ProjectStatus


class ExitCode(IntEnum):
    COMPLETED = 0
    FAILED = 1  # failed, or stopped
    ERROR = 1  # one ``error:`` line: bad input, a refused request, a service that does not answer
    PAUSED = 2  # the last line says why: budget, circuit breaker, API key
    INTERRUPTED = 130  # Ctrl-C, after stopping the project
    TERMINATED = 143  # SIGTERM, handled like Ctrl-C

    @classmethod
    def for_status(cls, status: ProjectStatus) -> ExitCode:
        """How ``raas run`` or ``raas follow`` exits when the project is ``status``."""
        return _FOR_STATUS.get(status, cls.FAILED)


_FOR_STATUS = {
    ProjectStatus.COMPLETED: ExitCode.COMPLETED,
    ProjectStatus.FAILED: ExitCode.FAILED,
    ProjectStatus.STOPPED: ExitCode.FAILED,
    ProjectStatus.PAUSED: ExitCode.PAUSED,
    # Its pull request is open (and followed): the run did what it was asked.
    ProjectStatus.DELIVERED: ExitCode.COMPLETED,
    # ``raas run`` stops where a person must decide (``raas approve``): like a pause, it is not over.
    ProjectStatus.WAITING_FOR_APPROVAL: ExitCode.PAUSED,
}
