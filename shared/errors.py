"""One error tree, split by what the caller does about it.

The API maps it to status codes in one handler, the CLI to one-line messages and exit codes,
the MCP tools to tool errors. Messages say what was wrong and what to do. Every error raised on
purpose is defined here::

    RaasError (500)
    ├── NotFound (404)
    ├── Conflict (409)
    ├── Unauthorized (401)
    ├── InvalidInput (422) ............ the caller's input: fix it and ask again
    │   ├── PathOutsideWorkspace ...... a tool's path leaves the workspace
    │   ├── ScgError .................. a transcript file does not parse
    │   ├── UnsafeMember .............. an archive entry a strict unpack refuses
    │   └── CallExceedsRateLimit ...... one model call larger than a whole window's limit
    ├── SubmissionsRateLimited (429) .. a tenant submits faster than allowed: wait
    ├── RateLimitWaitTooLong (429) .... the rate limit's room comes later than we would wait
    ├── GitError ...................... a git command on a workspace failed
    ├── SandboxError .................. the sandbox could not do what was asked
    │   ├── SandboxStartError
    │   ├── StreamClosed .............. the in-sandbox helper ended before answering
    │   └── ToolTimeout (also TimeoutError)
    └── ServiceUnavailable (503) ...... a service we depend on does not answer

A few modules keep a local control-flow signal of their own (the channel's
``DeadlineExceeded``, the scg parser's ``BadCell``, the session's ``SessionFailure``, the
stream's ``IncompleteReply``, the coordinator client's ``_Unavailable``, the in-sandbox
helper's ``Outside``): each is caught inside its module or its caller and turned into one of the
errors above, and says so in its docstring.
"""

from __future__ import annotations

from typing import Any


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


class PathOutsideWorkspace(InvalidInput):
    """A tool was asked for a path that leaves the workspace."""


class ScgError(InvalidInput):
    """A transcript file that does not parse; the message names the file and the line."""


class UnsafeMember(InvalidInput):
    """Strict mode: the archive holds an entry that would be left out; nothing was written.

    ``entry`` is the :class:`shared.archive.LeftOut` that was refused (its name and reason).
    """

    def __init__(self, message: str, entry: Any) -> None:
        super().__init__(message)
        self.entry = entry


class CallExceedsRateLimit(InvalidInput):
    """One call's estimate is larger than a whole window's limit: it could never be admitted."""


class SubmissionsRateLimited(RaasError):
    """A tenant submits projects faster than its limit allows."""

    status_code = 429


class RateLimitWaitTooLong(RaasError):
    """Room in the limits would come later than the caller is willing to wait."""

    status_code = 429


class GitError(RaasError):
    """A git command on a workspace failed; the message carries git's own words."""


class SandboxError(RaasError):
    """The sandbox could not do what was asked (not the command's own failure)."""


class SandboxStartError(SandboxError):
    """No sandbox could be started for the iteration."""


class StreamClosed(SandboxError):
    """The exec'd process ended (or its connection broke) before answering."""


class ToolTimeout(SandboxError, TimeoutError):
    """A tool's command overran its timeout and was killed."""


class ServiceUnavailable(RaasError):
    """A service we depend on (coordinator, database, broker) does not answer."""

    status_code = 503
