"""One error tree, split by what the caller does about it.

The API maps it to status codes in one handler, the CLI to one-line messages and exit codes,
the MCP tools to tool errors. Messages say what was wrong and what to do. Every error raised on
purpose is defined here::

    RaasError (500)
    ├── NotFound (404)
    │   └── PageNotFound .............. answered as the dashboard's 404 page, not the API's JSON
    ├── Conflict (409)
    │   └── ProjectNotRunning ......... a call waited for a project that no longer runs
    ├── Unauthorized (401)
    ├── SignInRequired (401) .......... the dashboard has no session that holds: sign in again
    ├── CsrfRejected (403) ............ a dashboard action without its session's CSRF token
    ├── InvalidInput (422) ............ the caller's input: fix it and ask again
    │   ├── PathOutsideWorkspace ...... a tool's path leaves the workspace
    │   ├── ScgError .................. a transcript file does not parse
    │   ├── UnsafeMember .............. an archive entry a strict unpack refuses
    │   ├── CallExceedsRateLimit ...... one model call larger than a whole window's limit
    │   └── QueryRefused (400) ........ a filter or page a listing cannot answer
    ├── SubmissionsRateLimited (429) .. a tenant submits faster than allowed: wait
    ├── RateLimitWaitTooLong (429) .... the rate limit's room comes later than we would wait
    ├── BudgetExceeded (402) .......... not even the smallest call fits in the budget left
    ├── GitError ...................... a git command on a workspace failed
    │   └── PushError ................. the user's remote was unreachable or refused the credential
    ├── ForgeError .................... a forge refused a pull request call: its status and words
    ├── SandboxError .................. the sandbox could not do what was asked
    │   ├── SandboxStartError
    │   ├── StreamClosed .............. the in-sandbox helper ended before answering
    │   └── ToolTimeout (also TimeoutError)
    └── ServiceUnavailable (503) ...... a service we depend on does not answer

Control-flow signals are not errors a caller sees, so they stay beside the code that raises and
catches them, each saying so in its docstring; every one is caught inside its module or by its
one caller and becomes one of the errors above, a recorded outcome, or a clean stop:

- ``workers.sandbox.channel.DeadlineExceeded``: the helper did not answer in time (→ ToolTimeout).
- ``workers.sandbox.helper.Outside``: a path leaves the workspace, inside the sandbox, where only
  the stdlib is importable (→ PathOutsideWorkspace).
- ``workers.llm.retry.IncompleteReply``: a stream ended without a stop reason (retried).
- ``workers.workspace_transfer._Unavailable``: the coordinator answered 502-504 (retried, then
  ServiceUnavailable).
- ``workers.gateway.gate.Refused``: a call the gateway answers itself with an API error body.
- ``workers.runners.base.RunFailure``: a run cannot go on (recorded as the iteration's end and kind).
- ``workers.environment.snapshot.RegistryFailed``: a snapshot registry's push or pull failed in
  its progress stream (logged; the setup runs here).
- ``workers.environment.snapshot.SetupFailed``: a project's environment cannot be made (recorded as
  the iteration's end, kind ``environment``: the project fails).
- ``orchestrator.transcripts.scg.cells.BadCell``: a cell does not parse (→ ScgError with the line).
- ``orchestrator.delivery.run._Failed``: a delivery step failed (→ the ``delivery_failed`` event).
- ``orchestrator.embedded.run.Terminated``: SIGTERM, a KeyboardInterrupt the embedded run stops on.
- ``orchestrator.workspaces.objects.ObjectMissing``: a workspace's bundle is gone from the object
  store because a newer write replaced it (a read takes the pointer again).

A builtin exception raised elsewhere is no answer to a caller either: a ``ValueError`` in a
pydantic validator is pydantic's protocol (the parse turns it into InvalidInput), and a
``LookupError``, ``RuntimeError`` or ``TypeError`` says an invariant of the code broke (a bug).
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


class QueryRefused(InvalidInput):
    status_code = 400


class Unauthorized(RaasError):
    status_code = 401


class PageNotFound(NotFound):
    """A NotFound answered as the dashboard's 404 page rather than the API's JSON."""


class SignInRequired(RaasError):
    """No dashboard session, or one that no longer holds (expired, forged, its token deleted)."""

    status_code = 401


class CsrfRejected(RaasError):
    """A dashboard action without this session's CSRF token, or from another origin."""

    status_code = 403


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


class PushError(GitError):
    """A push to the user's remote failed for another reason than someone else's commits
    (unreachable, refused credential); the message is scrubbed of the credential."""


class ForgeError(RaasError):
    """The forge refused a request: its HTTP status (0: no answer) and its own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


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


class BudgetExceeded(RaasError):
    """Not even the smallest model call fits in what remains of the project's budget: the call is
    refused and the project paused ``budget_exceeded``; raising the limit resumes it."""

    status_code = 402


class ProjectNotRunning(Conflict):
    """The project was paused or stopped while one of its calls waited to be admitted."""
