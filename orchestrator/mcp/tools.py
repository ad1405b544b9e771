"""The MCP tools: a handful of verbs on projects, written once against a Backend.

Why few and short: an MCP client pays for every tool's schema and description in its context
before any work (a well-known peer's 96 tools cost ~39k tokens), so there are ten and
their listing stays under 2,000 tokens (tests/integration/test_mcp_http.py counts it). Each
schema is generated from the pydantic model that validates the arguments, with pydantic's
titles left out; bad arguments come back as one line naming each argument at fault, and errors
of the ``shared.errors`` tree as the CLI's one-line messages.

The functions here are synchronous (the core and the HTTP client are); the server runs them in
a worker thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.mcp.backends import Action, Backend, TriggerAction
from orchestrator.scheduling.submission import read_project_files
from shared.archive import pack_directory, pack_files
from shared.errors import InvalidInput, RaasError, one_line
from shared.memory import QUERY_CHARS, SEARCH_LIMIT
from shared.models import ProjectStatus
from shared.said import SAID_CHARS
from shared.schemas import EventOut

log = logging.getLogger(__name__)

#: Inline files are for small projects; a larger one is a directory (``raas mcp``, ``raas submit``).
MAX_INLINE_BYTES = 1024 * 1024
#: Events one follow_events call returns at most; the next call goes on from ``next_after_seq``.
EVENTS_PER_CALL = 100
MAX_WAIT_S = 60.0
#: The newest iterations project_status shows (the total is given beside them).
STATUS_ITERATIONS = 10
INT32_MAX = 2**31 - 1


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


ProjectId = Annotated[str, Field(min_length=1, max_length=64, description="Project id")]


class ProjectArgs(_Args):
    project_id: ProjectId


class SubmitArgs(_Args):
    files: dict[str, str] = Field(
        default_factory=dict, description="{path: text}; PROMPT.md required, raas.toml optional"
    )
    name: str = Field("", max_length=200, description="Project name")

    @field_validator("files")
    @classmethod
    def _small(cls, files: dict[str, str]) -> dict[str, str]:
        size = sum(len(path.encode()) + len(text.encode()) for path, text in files.items())
        if size > MAX_INLINE_BYTES:
            msg = f"{size} bytes in all; inline files are limited to 1 MiB (submit a directory instead)"
            raise ValueError(msg)
        return files

    @field_validator("name")
    @classmethod
    def _plain(cls, name: str) -> str:
        if "\x00" in name:
            msg = "contains a NUL byte; it must be plain text"
            raise ValueError(msg)
        return name


class SubmitLocalArgs(SubmitArgs):
    directory: str = Field("", description="Absolute path of a project directory on this machine")

    @model_validator(mode="after")
    def _one_source(self) -> SubmitLocalArgs:
        if bool(self.directory) == bool(self.files):
            msg = "pass either `directory` or `files`"
            raise ValueError(msg)
        return self


class FollowArgs(_Args):
    project_id: ProjectId
    after_seq: int = Field(0, ge=0, le=INT32_MAX, description="Last seq seen (0: from the start)")
    wait_s: float = Field(10.0, ge=0, le=MAX_WAIT_S, description="Seconds to wait if nothing is new")


class ControlArgs(_Args):
    project_id: ProjectId
    action: Action


class DecideArgs(_Args):
    project_id: ProjectId
    reject: bool = Field(False, description="Reject: the agent works on, told the comment")
    comment: str | None = Field(None, max_length=SAID_CHARS, description="Words the agent reads")


class SayArgs(_Args):
    project_id: ProjectId
    text: str = Field(min_length=1, max_length=SAID_CHARS, description="What to tell the agent")
    agent: str | None = Field(None, max_length=32, description="An agent's id; none: the next to run")
    now: bool = Field(False, description="End its turn after the tool call in flight")


class MemoryArgs(_Args):
    project_id: ProjectId
    query: str = Field(
        min_length=1, max_length=QUERY_CHARS, description='Full text: words, "a phrase", or, -word'
    )
    limit: int = Field(10, ge=1, le=SEARCH_LIMIT)


class TriggersArgs(_Args):
    trigger: str = Field("", max_length=100, description="Id or name: that one, with its latest runs")


class TriggerControlArgs(_Args):
    trigger: str = Field(min_length=1, max_length=100, description="Trigger id or name")
    action: TriggerAction


class NoArgs(_Args):
    pass


class EventsPage(BaseModel):
    """What follow_events answers: the events, where to go on from, and whether it is over."""

    events: list[EventOut]
    next_after_seq: int
    status: ProjectStatus
    ended: bool


A = TypeVar("A", bound=_Args)


@dataclass(frozen=True)
class Tool(Generic[A]):
    name: str
    description: str
    args: type[A]
    run: Callable[[Backend, A], Any]

    def input_schema(self) -> dict[str, Any]:
        return _untitled(self.args.model_json_schema())


def _untitled(schema: Any) -> Any:
    """The schema without pydantic's "title" keys: they repeat the names, at a cost in tokens."""
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def _submit(backend: Backend, args: SubmitArgs) -> BaseModel:
    directory = args.directory if isinstance(args, SubmitLocalArgs) else ""
    if not directory:
        return backend.submit(pack_files(args.files), args.name or "project")
    root = Path(directory).expanduser()
    if not root.is_dir():
        msg = f"directory {directory!r} is not a directory on the machine running `raas mcp`"
        raise InvalidInput(msg)
    read_project_files(root)  # the coordinator's own checks, before anything is uploaded
    return backend.submit(pack_directory(root), args.name or root.resolve().name)


def _status(backend: Backend, args: ProjectArgs) -> dict[str, Any]:
    detail = backend.status(args.project_id).model_dump(mode="json")
    detail["iterations_total"] = len(detail["iterations"])
    detail["iterations"] = detail["iterations"][-STATUS_ITERATIONS:]
    return detail


def _contiguous(events: list[EventOut], after_seq: int) -> list[EventOut]:
    """The events up to the first gap: a later seq can be committed before an earlier one, and a
    cursor moved past the gap would never see the missing event (queries.follow does the same)."""
    kept: list[EventOut] = []
    for event in events:
        if event.seq != after_seq + len(kept) + 1:
            break
        kept.append(event)
    return kept


def _follow(backend: Backend, args: FollowArgs) -> EventsPage:
    pid, after = args.project_id, args.after_seq
    found = _contiguous(backend.history(pid, after, EVENTS_PER_CALL), after)
    if not found and args.wait_s > 0 and not backend.project(pid).status.is_terminal:
        first = backend.wait_event(pid, after, args.wait_s)  # the next event, in order
        if first is not None:
            found = [first, *_contiguous(backend.history(pid, first.seq, EVENTS_PER_CALL - 1), first.seq)]
    last = found[-1].seq if found else after
    status = backend.project(pid).status
    # Over, and nothing left to read: a project's last events may be written after its status.
    ended = status.is_terminal and not backend.history(pid, last, 1)
    return EventsPage(events=found, next_after_seq=last, status=status, ended=ended)


def _control(backend: Backend, args: ControlArgs) -> BaseModel:
    return backend.control(args.project_id, args.action)


def _decide(backend: Backend, args: DecideArgs) -> BaseModel:
    return backend.decide(args.project_id, args.reject, args.comment)


def _say(backend: Backend, args: SayArgs) -> BaseModel:
    return backend.say(args.project_id, args.text, args.agent, args.now)


def _cost(backend: Backend, args: ProjectArgs) -> BaseModel:
    return backend.cost(args.project_id)


def _memory(backend: Backend, args: MemoryArgs) -> dict[str, Any]:
    found = backend.search_memory(args.project_id, args.query, args.limit)
    return {"entries": [entry.model_dump(mode="json") for entry in found]}


#: What a listing shows of each trigger; one trigger shown alone has its spec and runs too.
TRIGGER_SUMMARY = {"id", "name", "source", "status", "on_active", "next_slot_at", "hook_path"}


def _triggers(backend: Backend, args: TriggersArgs) -> dict[str, Any]:
    if not args.trigger:
        return {"triggers": [t.model_dump(mode="json", include=TRIGGER_SUMMARY) for t in backend.triggers()]}
    found, runs = backend.trigger(args.trigger)
    return {**found.model_dump(mode="json"), "runs": [run.model_dump(mode="json") for run in runs]}


def _control_trigger(backend: Backend, args: TriggerControlArgs) -> dict[str, Any]:
    return backend.control_trigger(args.trigger, args.action).model_dump(mode="json", include=TRIGGER_SUMMARY)


def _notifications(backend: Backend, _args: NoArgs) -> dict[str, Any]:
    return {"subscriptions": [row.model_dump(mode="json") for row in backend.notifications()]}


_FILES = "`files` ({path: text}, PROMPT.md required; under 1 MiB)"


@cache
def tools_for(reads_local_directories: bool) -> Mapping[str, Tool[Any]]:
    """The tools by name, as a backend can serve them (a directory only where it is local)."""
    if reads_local_directories:
        submit: Tool[Any] = Tool(
            "submit_project",
            f"Submit and start a project from `directory` (on this machine) or {_FILES}. Returns its id.",
            SubmitLocalArgs,
            _submit,
        )
    else:
        submit = Tool(
            "submit_project",
            f"Submit and start a project from {_FILES}. Returns its id.",
            SubmitArgs,
            _submit,
        )
    listed: list[Tool[Any]] = [
        submit,
        Tool(
            "project_status",
            "A project's status, spend, budget, agents and latest iterations.",
            ProjectArgs,
            _status,
        ),
        Tool(
            "follow_events",
            "Events after `after_seq`, waiting up to `wait_s` if there are none yet. "
            "Call again with `next_after_seq` until `ended`.",
            FollowArgs,
            _follow,
        ),
        Tool("control_project", "Pause, resume or stop a project.", ControlArgs, _control),
        Tool("project_cost", "What a project cost: total, by agent, model and hour.", ProjectArgs, _cost),
        Tool("search_memory", "Search a project's memory bank; best matches first.", MemoryArgs, _memory),
        Tool(
            "decide_approval",
            "Approve (or reject) what a waiting_for_approval project waits for; once only.",
            DecideArgs,
            _decide,
        ),
        Tool(
            "say_to_agent",
            "Tell a running project's agent something (`raas say`); it reads it at its next turn.",
            SayArgs,
            _say,
        ),
        Tool(
            "list_triggers",
            "Your triggers; with `trigger`, its spec and latest runs.",
            TriggersArgs,
            _triggers,
        ),
        Tool(
            "control_trigger",
            "Pause or resume a trigger (paused: deliveries ignored, schedule slots skipped).",
            TriggerControlArgs,
            _control_trigger,
        ),
        Tool(
            "list_notifications",
            "Your notification subscriptions and their state (why a failing endpoint was paused).",
            NoArgs,
            _notifications,
        ),
    ]
    return {tool.name: tool for tool in listed}


def _invalid(tool: str, exc: ValidationError) -> str:
    """Each argument at fault and why, on one line."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        why = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {why}" if where else why)
    return f"invalid arguments for {tool}: " + "; ".join(problems)


def call(
    tools: Mapping[str, Tool[Any]], backend: Backend, name: str, arguments: Mapping[str, Any]
) -> tuple[str, bool]:
    """Run one tool call: (the text to answer, whether it is an error)."""
    tool = tools.get(name)
    if tool is None:
        return f"no tool {name!r}; the tools are {', '.join(sorted(tools))}", True
    try:
        args = tool.args.model_validate(dict(arguments))
    except ValidationError as exc:
        return _invalid(name, exc), True
    try:
        result = tool.run(backend, args)
    except RaasError as exc:
        return one_line(exc), True
    except Exception as exc:
        log.exception("MCP tool %s failed", name)
        return f"{name} failed unexpectedly ({type(exc).__name__}); the MCP server's log says why", True
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False), False
