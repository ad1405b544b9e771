"""One error tree, split by what the caller does about it.

The API maps it to status codes in one handler, the CLI to one-line messages and exit codes.
Messages say what was wrong and what to do.
"""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """An error's message as one line, never wrapped: how the CLI and the MCP tools show it."""
    return " ".join(str(exc).split())


class RaasError(Exception):
    """Base of every error Constellation raises on purpose."""

    status_code = 500


class NotFound(RaasError):
    status_code = 404


class Conflict(RaasError):
    status_code = 409


class InvalidInput(RaasError):
    status_code = 422


class Unauthorized(RaasError):
    status_code = 401


class BudgetExceeded(RaasError):
    status_code = 402


class PathOutsideWorkspace(InvalidInput):
    """A tool was asked for a path that leaves the workspace."""


class SandboxError(RaasError):
    """The sandbox could not do what was asked (not the command's own failure)."""


class SandboxStartError(SandboxError):
    pass


class ToolTimeout(SandboxError, TimeoutError):
    pass


class ServiceUnavailable(RaasError):
    """A service we depend on (coordinator, database, broker) does not answer."""

    status_code = 503
