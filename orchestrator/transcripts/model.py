"""A project's transcript: every message of every agent, the agent tree, the subagents' reports,
what the agents wrote to the memory bank and sent each other, and the totals; narrowing it to one
agent, its JSON form, and reading a transcript file.

It is read from the database by :mod:`orchestrator.transcripts.store`, written in the compact scg
format by :mod:`orchestrator.transcripts.scg` and for people by :mod:`orchestrator.transcripts.render`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from shared.errors import NotFound
from shared.models import ProjectStatus
from shared.schemas import AgentNode
from shared.usage import Spelled, Usage


def _as_utc(value: datetime) -> datetime:
    # SQLite hands back naive timestamps; every one the service writes is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UTCDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Strict):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(_Strict):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Strict):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


class RawBlock(_Strict):
    """Any other block (thinking, a tool result with structured content), kept as it was stored."""

    type: Literal["raw"] = "raw"
    data: dict[str, Any]


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | RawBlock, Field(discriminator="type")]


#: A message's usage as transcripts spell it (their format predates the one Usage model).
TranscriptUsage = Annotated[
    Usage,
    Spelled(cache_creation_input_tokens="cache_write_tokens", cache_read_input_tokens="cache_read_tokens"),
]


class ProjectInfo(_Strict):
    id: str
    name: str
    status: ProjectStatus
    reason: str | None = None
    model: str | None = None
    created_at: UTCDatetime
    started_at: UTCDatetime | None = None
    finished_at: UTCDatetime | None = None


class TranscriptAgent(AgentNode):
    """One agent of the tree, listed parents first (depth-first, in creation order)."""

    model_config = ConfigDict(extra="forbid")

    parent: str | None = None
    failed_iterations: int = 0


class TranscriptMessage(_Strict):
    seq: int
    agent: str
    iteration: int
    attempt: int = 1
    role: Literal["user", "assistant"]
    created_at: UTCDatetime
    content: list[Block]
    model: str | None = None
    stop_reason: str | None = None
    usage: TranscriptUsage | None = None
    cost_usd: Decimal = Decimal(0)
    duration_s: float | None = None


class Subagent(_Strict):
    """What a subagent was asked (by its parent's iteration ``iteration``) and what it reported."""

    agent: str
    iteration: int | None = None
    prompt: str | None = None
    report: str | None = None


class MemoryWrite(_Strict):
    """A write of the memory bank by an agent of the transcript (``memory_write``)."""

    agent: str
    iteration: int
    created_at: UTCDatetime
    key: str
    version: int
    conflict: bool = False
    """The write did not see another current value of the key: both were kept."""
    tags: list[str] = Field(default_factory=list)
    value: str


class AgentMail(_Strict):
    """A message an agent sent other agents (``send_message``); ``to`` holds the recipients' ids.

    In one agent's transcript its sender may be outside the agents listed (a message it received).
    """

    agent: str
    iteration: int
    created_at: UTCDatetime
    to: list[str]
    broadcast: bool = False
    text: str


class Metrics(_Strict):
    # The cache counts keep the names transcripts have always written.
    model_config = ConfigDict(extra="forbid", validate_by_name=True, serialize_by_alias=True)

    messages: int = 0
    iterations: int = 0
    failed_iterations: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = Field(default=0, alias="cache_write_tokens")
    cache_read_input_tokens: int = Field(default=0, alias="cache_read_tokens")
    cost_usd: Decimal = Decimal(0)
    llm_s: float = 0.0
    duration_s: float | None = None


#: The metrics' keys as transcripts write them.
METRIC_KEYS = [field.alias or name for name, field in Metrics.model_fields.items()]


class Transcript(_Strict):
    project: ProjectInfo
    agents: list[TranscriptAgent]
    messages: list[TranscriptMessage]
    subagents: list[Subagent]
    # Transcripts written before the memory bank have neither.
    memory: list[MemoryWrite] = Field(default_factory=list)
    mail: list[AgentMail] = Field(default_factory=list)
    metrics: Metrics

    @model_validator(mode="after")
    def _consistent(self) -> Transcript:
        ids = [a.id for a in self.agents]
        if len(set(ids)) != len(ids):
            msg = "agent ids must be unique"
            raise ValueError(msg)
        known = set(ids)
        for previous, message in zip([None, *self.messages], self.messages, strict=False):
            if previous is not None and message.seq <= previous.seq:
                msg = f"message {message.seq} comes after message {previous.seq}; seq must increase"
                raise ValueError(msg)
            if message.agent not in known:
                msg = f"message {message.seq} names agent {message.agent!r}, which is not in the agents"
                raise ValueError(msg)
        for sub in self.subagents:
            if sub.agent not in known:
                msg = f"subagent {sub.agent!r} is not in the agents"
                raise ValueError(msg)
        for write in self.memory:
            if write.agent not in known:
                msg = f"memory write of {write.key!r} names agent {write.agent!r}, which is not in the agents"
                raise ValueError(msg)
        return self

    def for_agent(self, ref: str) -> Transcript:
        """One agent's conversation: its own messages, the agents it spawned and their reports,
        what they wrote to the memory bank, sent, and the messages sent to them.

        ``ref`` is an agent id, a unique prefix of one, or ``root`` (the first top-level agent).

        Raises:
            NotFound: no agent, or more than one, matches ``ref``.
        """
        agent = find_agent(self, ref)
        subtree = {agent.id}
        for node in self.agents:  # parents come before their children
            if node.parent in subtree:
                subtree.add(node.id)
        agents = [a for a in self.agents if a.id in subtree]
        messages = [m for m in self.messages if m.agent == agent.id]
        span = (messages[0].created_at, messages[-1].created_at) if messages else (None, None)
        return Transcript(
            project=self.project,
            agents=agents,
            messages=messages,
            subagents=[s for s in self.subagents if s.agent in subtree],
            memory=[w for w in self.memory if w.agent in subtree],
            mail=[m for m in self.mail if m.agent in subtree or subtree.intersection(m.to)],
            metrics=measure([agent], messages, *span),
        )


def find_agent(transcript: Transcript, ref: str) -> TranscriptAgent:
    if ref == "root":
        matches = [a for a in transcript.agents if a.parent is None][:1]
    else:
        exact = [a for a in transcript.agents if a.id == ref]
        matches = exact or [a for a in transcript.agents if a.id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    listed = ", ".join(f"{a.id} ({a.category})" for a in transcript.agents) or "none"
    what = "matches more than one agent" if matches else "is not an agent"
    msg = f"{ref!r} {what} of project {transcript.project.id}; its agents: {listed}"
    raise NotFound(msg)


def measure(
    agents: list[TranscriptAgent],
    messages: list[TranscriptMessage],
    start: datetime | None,
    end: datetime | None,
) -> Metrics:
    """The totals of ``messages``; iterations are counted over ``agents``."""
    metrics = Metrics(
        messages=len(messages),
        iterations=sum(a.iterations for a in agents),
        failed_iterations=sum(a.failed_iterations for a in agents),
        duration_s=(end - start).total_seconds() if start and end else None,
    )
    usage = Usage()
    for message in messages:
        for block in message.content:
            metrics.tool_calls += isinstance(block, ToolUseBlock)
            metrics.tool_errors += isinstance(block, ToolResultBlock) and block.is_error
        usage += message.usage or Usage()
        metrics.cost_usd += message.cost_usd
        metrics.llm_s += message.duration_s or 0.0
    metrics.llm_s = round(metrics.llm_s, 3)  # a sum of floats would show its rounding noise
    return metrics.model_copy(update=usage.model_dump())


def to_json(transcript: Transcript) -> str:
    return transcript.model_dump_json(indent=2) + "\n"
