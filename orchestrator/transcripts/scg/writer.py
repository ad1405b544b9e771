"""Writing a transcript as scg: a header line, one line per agent, message, subagent, memory write
and message between agents, then the metrics (:func:`write`); and its size against JSON."""

from __future__ import annotations

import json

from orchestrator.transcripts.model import (
    Block,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    to_json,
)
from orchestrator.transcripts.scg.cells import dump_json, escape, number_cell, offset, opt, usage_cell
from orchestrator.transcripts.scg.layout import END, LEGENDS, MAGIC, METRICS, SECTIONS, VERSION


def write(transcript: Transcript) -> str:
    """The transcript in scg, one line per agent, message, subagent and metric."""
    project = transcript.project
    header = {
        "project": project.id,
        "name": project.name,
        "status": project.status.value,
        "reason": project.reason,
        "model": project.model,
        "created": project.created_at.isoformat(),
        "started": project.started_at.isoformat() if project.started_at else None,
        "finished": project.finished_at.isoformat() if project.finished_at else None,
    }
    lines = [" ".join([MAGIC, VERSION, *(f"{k}={opt(v, space=True)}" for k, v in header.items())])]
    index = {agent.id: str(i) for i, agent in enumerate(transcript.agents)}
    lines += [SECTIONS[0], LEGENDS[0]]
    for i, a in enumerate(transcript.agents):
        cells = [str(i), escape(a.id), escape(a.category), str(a.depth), opt(a.parent), a.status.value]
        lines.append("|".join([*cells, opt(a.task), str(a.iterations), str(a.failed_iterations)]))
    lines += [SECTIONS[1], LEGENDS[1]]
    previous: list[str] = []
    for m in transcript.messages:
        model = "=" if m.model is not None and m.model == project.model else opt(m.model)
        cells = [str(m.seq), offset(m.created_at - project.created_at), m.role[0], index[m.agent]]
        cells += [str(m.iteration), str(m.attempt), model, opt(m.stop_reason), usage_cell(m.usage)]
        cells += [
            str(m.cost_usd),
            number_cell(m.duration_s),
            *(c for b in m.content for c in _block(b, previous)),
        ]
        lines.append("|".join(cells))
        previous = [b.id for b in m.content if isinstance(b, ToolUseBlock)]
    lines += [SECTIONS[2], LEGENDS[2]]
    for s in transcript.subagents:
        cells = [index[s.agent], number_cell(s.iteration), opt(s.prompt), opt(s.report)]
        lines.append("|".join(cells))
    if transcript.memory:
        lines += [SECTIONS[3], LEGENDS[3]]
    for w in transcript.memory:
        cells = [offset(w.created_at - project.created_at), index[w.agent], str(w.iteration), escape(w.key)]
        cells += [str(w.version), str(int(w.conflict)), _dump_list(w.tags), escape(w.value)]
        lines.append("|".join(cells))
    if transcript.mail:
        lines += [SECTIONS[4], LEGENDS[4]]
    for sent in transcript.mail:
        cells = [offset(sent.created_at - project.created_at), escape(sent.agent), str(sent.iteration)]
        cells += [str(int(sent.broadcast)), _dump_list(sent.to), escape(sent.text)]
        lines.append("|".join(cells))
    lines += [SECTIONS[METRICS], LEGENDS[METRICS]]
    lines += [f"{key}={number_cell(value)}" for key, value in transcript.metrics.model_dump().items()]
    lines.append(END)
    return "\n".join(lines) + "\n"


def sizes(transcript: Transcript) -> dict[str, int]:
    """Bytes of the transcript as scg, as the JSON format (indented) and as compact JSON."""
    return {
        "scg": len(write(transcript).encode()),
        "json": len(to_json(transcript).encode()),
        "json_compact": len(transcript.model_dump_json().encode()),
    }


def _dump_list(items: list[str]) -> str:
    return escape(json.dumps(items, ensure_ascii=False, separators=(",", ":")))


def _block(block: Block, previous: list[str]) -> list[str]:
    if isinstance(block, TextBlock):
        return ["T", escape(block.text)]
    if isinstance(block, ToolUseBlock):
        return ["U", escape(block.id), escape(block.name), dump_json(block.input)]
    if isinstance(block, ToolResultBlock):
        # A result names a call of the message before it by position: ids are long.
        ref = f"^{previous.index(block.tool_use_id)}" if block.tool_use_id in previous else None
        return ["R", ref or escape(block.tool_use_id), str(int(block.is_error)), escape(block.content)]
    return ["X", dump_json(block.data)]
