"""The tools answered from the database rather than the sandbox: the project's memory bank
(``memory_write``, ``memory_read``, ``memory_search``) and messages to other agents
(``send_message``).

Their rules are shared (:mod:`shared.memory`, :mod:`shared.mailbox`); here they meet the model:
an argument model (the published schema is generated from it), a description, and the answer as
text. Like the sandbox tools, every mistake (bad arguments, a limit, an unknown recipient) is an
error result the model reads and nothing is stored; a write or a send records its event in the
same transaction, and :class:`Answer` hands it back to be published after the commit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import Field, ValidationError
from sqlalchemy.orm import Session

from shared import mailbox, memory
from shared.db import session_scope, survives_restarts
from shared.errors import InvalidInput
from shared.project_config import MemoryConfig
from shared.schemas import EventOut, MemoryEntryOut, MemoryValueOut
from shared.tool_names import MEMORY_READ, MEMORY_SEARCH, MEMORY_WRITE, SEND_MESSAGE
from workers.tools.base import ToolArgs, ToolResult, describe, error, input_schema

PREVIEW_CHARS = 300


@dataclass(frozen=True)
class Caller:
    """The tool call, and where its agent's memory is: its bank and the project's limits."""

    call: memory.ToolCall
    bank: str
    limits: MemoryConfig


@dataclass(frozen=True)
class Answer:
    result: ToolResult
    event: EventOut | None = None


A = TypeVar("A", bound=ToolArgs)


class CoordinationTool(ABC, Generic[A]):
    name: ClassVar[str]
    description: ClassVar[str]
    args_model: type[A]

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": input_schema(self.args_model),
        }

    def run(self, caller: Caller, args: dict[str, Any]) -> Answer:
        try:
            parsed = self.args_model.model_validate(args)
        except ValidationError as e:
            return Answer(error(f"{self.name}: {describe(e, self.args_model)}"))
        try:
            return _in_transaction(self, caller, parsed)
        except InvalidInput as e:
            return Answer(error(f"{self.name}: {e}"))

    @abstractmethod
    def invoke(self, session: Session, caller: Caller, args: A) -> Answer:
        """Do it in ``session``'s transaction; raise InvalidInput to refuse (nothing is stored)."""


@survives_restarts
def _in_transaction(tool: CoordinationTool[A], caller: Caller, args: A) -> Answer:
    # Retrying is safe: a write or a send is keyed by its tool call.
    with session_scope() as session:
        return tool.invoke(session, caller, args)


def _writer(value: MemoryValueOut) -> str:
    who = f"{value.agent_category or 'agent'} {value.agent_id}"
    when = f" in iteration {value.iteration}" if value.iteration is not None else ""
    tags = f", tags: {', '.join(value.tags)}" if value.tags else ""
    return f"version {value.version} by {who}{when}{tags}"


def _cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


class MemoryWriteArgs(ToolArgs):
    key: memory.MemoryKey
    value: memory.MemoryValue = Field(
        description="The text to keep under the key (it replaces what you read)."
    )
    tags: memory.Tags = Field(
        default_factory=list,
        description="Labels to filter searches by: letters, digits and _ . : / - (at most 16).",
    )


class MemoryWriteTool(CoordinationTool[MemoryWriteArgs]):
    name = MEMORY_WRITE
    description = (
        "Keep a note in the project's memory bank under a key, for later iterations and other agents "
        "(subagents, parallel siblings). Read the key first when it may exist: a write that did not see "
        "the key's latest value keeps both and marks the key in conflict. Values are limited in size "
        "and the bank in keys (the project's raas.toml [memory])."
    )
    args_model = MemoryWriteArgs

    def invoke(self, session: Session, caller: Caller, args: MemoryWriteArgs) -> Answer:
        done = memory.write(session, caller.bank, args.key, args.value, args.tags, caller.call, caller.limits)
        head = f"Wrote {args.key!r} (version {done.version})."
        if not done.conflict:
            return Answer(ToolResult(content=head), done.event)
        if done.repeated:
            return Answer(ToolResult(content=f"{head} The key is in conflict: read it with memory_read."))
        kept = "\n".join(f"--- {_writer(v)}:\n{_cut(v.value)}" for v in done.others)
        note = (
            f"{head} The key is now in conflict: this write did not see {len(done.others)} other current "
            f"value(s), kept beside it:\n{kept}\nRead the key (memory_read) and write it again to resolve."
        )
        return Answer(ToolResult(content=note), done.event)


class MemoryReadArgs(ToolArgs):
    key: memory.MemoryKey


def _entry_text(entry: MemoryEntryOut) -> str:
    if not entry.conflict:
        (value,) = entry.values
        return f"{entry.key!r} ({_writer(value)}):\n{value.value}"
    count = len(entry.values)
    parts = [f"{entry.key!r} is in conflict: {count} values were written without seeing each other."]
    for number, value in enumerate(entry.values, start=1):
        parts.append(f"--- value {number} of {count}: {_writer(value)}\n{value.value}")
    parts.append(
        "To resolve it, write the key again (memory_write): having read them, your write replaces all."
    )
    return "\n".join(parts)


class MemoryReadTool(CoordinationTool[MemoryReadArgs]):
    name = MEMORY_READ
    description = (
        "Read a key of the project's memory bank: its value with who wrote it (agent, iteration). "
        "When writers did not see each other's values the key is in conflict and every value is "
        "shown; writing the key after reading it resolves the conflict."
    )
    args_model = MemoryReadArgs

    def invoke(self, session: Session, caller: Caller, args: MemoryReadArgs) -> Answer:
        entry = memory.read(session, caller.bank, args.key, caller.call)
        if entry is None:
            return Answer(
                ToolResult(content=f"No entry for key {args.key!r}. memory_search finds keys by content.")
            )
        return Answer(ToolResult(content=_entry_text(entry)))


class MemorySearchArgs(ToolArgs):
    query: memory.SearchQuery = Field(
        description='Full-text search: words (all must match), "a phrase", a or b, -excluded.'
    )
    tags: memory.Tags = Field(default_factory=list, description="Only values carrying all of these tags.")
    limit: int = Field(default=10, ge=1, le=memory.SEARCH_LIMIT, description="Most keys to return (1-50).")


class MemorySearchTool(CoordinationTool[MemorySearchArgs]):
    name = MEMORY_SEARCH
    description = (
        "Search the project's memory bank by full text (words are stemmed), best match first; each "
        "result shows the key, its writer and the start of its value. Read a key with memory_read "
        "for its whole value."
    )
    args_model = MemorySearchArgs

    def invoke(self, session: Session, caller: Caller, args: MemorySearchArgs) -> Answer:
        found = memory.search(session, caller.bank, args.query, args.tags, args.limit)
        if not found:
            return Answer(ToolResult(content=f"No key matches {args.query!r}."))
        lines = [f"{len(found)} key(s) match {args.query!r}, best first:"]
        for rank, entry in enumerate(found, start=1):
            flag = f" [in conflict: {len(entry.values)} values]" if entry.conflict else ""
            lines.append(
                f"{rank}. {entry.key!r} ({_writer(entry.values[-1])}){flag}: {_cut(entry.values[-1].value)}"
            )
        return Answer(ToolResult(content="\n".join(lines)))


class SendMessageArgs(ToolArgs):
    to: mailbox.Recipient = Field(
        description='"parent", "broadcast" (every other agent of the project), or an agent\'s id.'
    )
    text: mailbox.MessageText = Field(description="The message (at most 8000 characters).")


class SendMessageTool(CoordinationTool[SendMessageArgs]):
    name = SEND_MESSAGE
    description = (
        "Send a message to another agent of the project: your parent, an agent by its id (e.g. a "
        "subagent you spawned), or broadcast to all. Each recipient reads it at the start of its next "
        "iteration, once, in the order sent. A recipient that will not run again is refused."
    )
    args_model = SendMessageArgs

    def invoke(self, session: Session, caller: Caller, args: SendMessageArgs) -> Answer:
        sent = mailbox.send(session, caller.call, args.to, args.text)
        who = ", ".join(sent.recipients)
        plural = "s" if len(sent.recipients) > 1 else ""
        return Answer(
            ToolResult(content=f"Sent to {who}; it reaches the recipient{plural} in their next iteration."),
            sent.event,
        )


COORDINATION_TOOLS: dict[str, CoordinationTool[Any]] = {
    tool.name: tool for tool in (MemoryWriteTool(), MemoryReadTool(), MemorySearchTool(), SendMessageTool())
}


def answer(caller: Caller, name: str, args: object) -> Answer:
    """Run one call of a coordination tool; every failure is an error result."""
    tool = COORDINATION_TOOLS[name]
    if not isinstance(args, dict):
        return Answer(error(f"{name}: the arguments must be a JSON object, not {type(args).__name__}"))
    return tool.run(caller, args)
