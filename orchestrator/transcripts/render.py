"""A transcript for people: as Markdown, as the plain lines ``raas logs`` prints, and replayed
with its original timing (messages, memory writes and messages between agents, as they happened).
"""

from __future__ import annotations

import heapq
import json
import re
import time
from collections.abc import Callable
from datetime import datetime

from orchestrator.transcripts.model import (
    AgentMail,
    Block,
    MemoryWrite,
    RawBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    TranscriptAgent,
    TranscriptMessage,
)
from shared.errors import InvalidInput

PREVIEW_CHARS = 600

#: What a replay shows, one at a time.
TranscriptItem = TranscriptMessage | MemoryWrite | AgentMail


def agent_label(agent: TranscriptAgent | None, agent_id: str) -> str:
    return f"{agent.category if agent else 'agent'} {agent_id[:8]}"


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any run of backticks inside, so the block cannot end early.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _code(text: str) -> str:
    """Inline code that no backtick in ``text`` can end early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"


def _usage_note(message: TranscriptMessage) -> str:
    parts = []
    if message.usage is not None:
        u = message.usage
        parts.append(f"{u.input_tokens} in / {u.output_tokens} out")
        if u.cache_creation_input_tokens or u.cache_read_input_tokens:
            parts.append(f"cache {u.cache_creation_input_tokens} written / {u.cache_read_input_tokens} read")
    if message.cost_usd:
        parts.append(f"${message.cost_usd:.4f}")
    if message.duration_s is not None:
        parts.append(f"{message.duration_s:.1f}s")
    return " · ".join(parts)


def _md_block(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolUseBlock):
        return f"**tool call** `{block.name}` · `{block.id}`\n\n" + _fence(
            json.dumps(block.input, indent=2, ensure_ascii=False), "json"
        )
    if isinstance(block, ToolResultBlock):
        flag = " · **error**" if block.is_error else ""
        return f"**tool result** · `{block.tool_use_id}`{flag}\n\n" + _fence(block.content, "text")
    kind = block.data.get("type", "block")
    return f"**{kind}**\n\n" + _fence(json.dumps(block.data, indent=2, ensure_ascii=False), "json")


def to_markdown(transcript: Transcript) -> str:
    """The whole transcript as a Markdown document."""
    p, m = transcript.project, transcript.metrics
    agents = {a.id: a for a in transcript.agents}
    out = [f"# Transcript of {p.name} (`{p.id}`)", ""]
    out.append(f"- status: **{p.status.value}**" + (f" ({p.reason})" if p.reason else ""))
    out.append(f"- model: {p.model or '-'}")
    out.append(
        f"- created {_when(p.created_at)}, started {_when(p.started_at)}, finished {_when(p.finished_at)}"
    )
    out += ["", "## Agents", ""]
    for a in transcript.agents:
        task = f" · task {a.task}" if a.task else ""
        failed = f" ({a.failed_iterations} failed)" if a.failed_iterations else ""
        out.append(
            f"{'  ' * a.depth}- {a.category} `{a.id}`{task} · {a.status.value} · "
            f"{a.iterations} iteration{'' if a.iterations == 1 else 's'}{failed}"
        )
    out += ["", "## Messages"]
    for msg in transcript.messages:
        title = [str(msg.seq), msg.role, agent_label(agents.get(msg.agent), msg.agent)]
        title.append(f"iteration {msg.iteration}" + (f" (attempt {msg.attempt})" if msg.attempt > 1 else ""))
        title.append(msg.created_at.strftime("%H:%M:%S"))
        note = _usage_note(msg)
        out += ["", "### " + " · ".join(title), ""]
        if note:
            out += [f"*{note}*", ""]
        out.append("\n\n".join(_md_block(b) for b in msg.content) or "*(empty)*")
    if transcript.subagents:
        out += ["", "## Subagents"]
    for sub in transcript.subagents:
        spawned = f" (spawned in iteration {sub.iteration})" if sub.iteration is not None else ""
        out += ["", f"### {agent_label(agents.get(sub.agent), sub.agent)}{spawned}", ""]
        out += ["**Prompt**", "", _fence(sub.prompt or "", "text"), "", "**Report**", ""]
        out.append(_fence(sub.report, "text") if sub.report is not None else "*(no report)*")
    out += _md_memory(transcript, agents) + _md_mail(transcript, agents)
    out += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    out += [f"| {name} | {value if value is not None else '-'} |" for name, value in m.model_dump().items()]
    return "\n".join(out) + "\n"


def _md_memory(transcript: Transcript, agents: dict[str, TranscriptAgent]) -> list[str]:
    out = ["", "## Memory"] if transcript.memory else []
    for w in transcript.memory:
        conflict = " · **conflict**" if w.conflict else ""
        tags = f" · tags {_code(', '.join(w.tags))}" if w.tags else ""
        title = f"{_code(w.key)} version {w.version} · {agent_label(agents.get(w.agent), w.agent)}"
        out += ["", f"### {title} · iteration {w.iteration} · {w.created_at:%H:%M:%S}{conflict}{tags}", ""]
        out.append(_fence(w.value, "text"))
    return out


def _md_mail(transcript: Transcript, agents: dict[str, TranscriptAgent]) -> list[str]:
    out = ["", "## Messages between agents"] if transcript.mail else []
    for m in transcript.mail:
        to = "all (broadcast)" if m.broadcast else ", ".join(agent_label(agents.get(a), a) for a in m.to)
        sender = agent_label(agents.get(m.agent), m.agent)
        out += ["", f"### {sender} → {to} · iteration {m.iteration} · {m.created_at:%H:%M:%S}", ""]
        out.append(_fence(m.text, "text"))
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.split("\n"))


def format_message(
    message: TranscriptMessage, agent: TranscriptAgent | None, tool_names: dict[str, str], full: bool = False
) -> str:
    """One message as plain text: a title line, then its blocks indented.

    ``tool_names`` maps tool-call ids to tool names; the calls of this message are added to it.
    """
    limit = 10**12 if full else PREVIEW_CHARS
    head = f"#{message.seq} {message.created_at:%H:%M:%S} {message.role} {agent_label(agent, message.agent)}"
    head += f" iteration {message.iteration}"
    note = _usage_note(message)
    lines = [head + (f"  ({note})" if note else "")]
    for block in message.content:
        if isinstance(block, TextBlock):
            lines.append(_indent(block.text))
        elif isinstance(block, ToolUseBlock):
            tool_names[block.id] = block.name
            lines.append(
                _indent(f"→ {block.name} " + _cut(json.dumps(block.input, ensure_ascii=False), limit))
            )
        elif isinstance(block, ToolResultBlock):
            mark = "error" if block.is_error else "ok"
            name = tool_names.get(block.tool_use_id, "tool")
            lines.append(_indent(f"← {name} {mark}: " + _cut(block.content, limit)))
        elif isinstance(block, RawBlock):
            lines.append(_indent(f"[{block.data.get('type', 'block')}]"))
    return "\n".join(lines)


def format_memory_write(write: MemoryWrite, agent: TranscriptAgent | None, full: bool = False) -> str:
    """A memory write as plain text, the way :func:`format_message` shows a message."""
    limit = 10**12 if full else PREVIEW_CHARS
    who = agent_label(agent, write.agent)
    head = f"{write.created_at:%H:%M:%S} memory_write {who} iteration {write.iteration}"
    conflict = " (in conflict: another value was kept)" if write.conflict else ""
    tags = f" [{', '.join(write.tags)}]" if write.tags else ""
    return f"{head}\n" + _indent(
        f"{write.key!r} version {write.version}{tags}{conflict}: " + _cut(write.value, limit)
    )


def format_mail(mail: AgentMail, agents: dict[str, TranscriptAgent], full: bool = False) -> str:
    """A message between agents as plain text."""
    limit = 10**12 if full else PREVIEW_CHARS
    to = "broadcast" if mail.broadcast else ", ".join(agent_label(agents.get(a), a) for a in mail.to)
    head = f"{mail.created_at:%H:%M:%S} send_message {agent_label(agents.get(mail.agent), mail.agent)}"
    return f"{head} iteration {mail.iteration} → {to}\n" + _indent(_cut(mail.text, limit))


def timeline(transcript: Transcript) -> list[TranscriptItem]:
    """The messages, memory writes and messages between agents in the order they happened (at
    one moment, messages first)."""

    def when(item: TranscriptItem) -> datetime:
        return item.created_at

    streams: list[list[TranscriptItem]] = [[*transcript.messages], [*transcript.memory], [*transcript.mail]]
    return list(heapq.merge(*streams, key=when))


def replay(
    transcript: Transcript,
    speed: float,
    emit: Callable[[TranscriptItem], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    max_wait_s: float | None = None,
) -> None:
    """Hand each item of the :func:`timeline` to ``emit`` after the time that passed before it,
    divided by ``speed``.

    Raises:
        InvalidInput: ``speed`` is not above 0, or ``max_wait_s`` is negative.
    """
    if not speed > 0:
        msg = f"--speed {speed} must be above 0 (2 is twice as fast as it happened)"
        raise InvalidInput(msg)
    if max_wait_s is not None and max_wait_s < 0:
        msg = f"--max-wait {max_wait_s} must not be negative"
        raise InvalidInput(msg)
    previous: datetime | None = None
    for item in timeline(transcript):
        if previous is not None:
            wait = max(0.0, (item.created_at - previous).total_seconds()) / speed
            if max_wait_s is not None:
                wait = min(wait, max_wait_s)
            if wait > 0:
                sleep(wait)
        emit(item)
        previous = item.created_at
