"""A transcript for people: as Markdown, as the plain lines ``raas logs`` prints, and replayed
with its original timing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime

from orchestrator.transcripts.model import (
    Block,
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


def agent_label(agent: TranscriptAgent | None, agent_id: str) -> str:
    return f"{agent.category if agent else 'agent'} {agent_id[:8]}"


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any run of backticks inside, so the block cannot end early.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


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
    out += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    out += [f"| {name} | {value if value is not None else '-'} |" for name, value in m.model_dump().items()]
    return "\n".join(out) + "\n"


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


def replay(
    transcript: Transcript,
    speed: float,
    emit: Callable[[TranscriptMessage], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    max_wait_s: float | None = None,
) -> None:
    """Hand each message to ``emit`` after the time that passed before it, divided by ``speed``.

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
    for message in transcript.messages:
        if previous is not None:
            wait = max(0.0, (message.created_at - previous).total_seconds()) / speed
            if max_wait_s is not None:
                wait = min(wait, max_wait_s)
            if wait > 0:
                sleep(wait)
        emit(message)
        previous = message.created_at
