"""Reading an scg transcript back (:func:`parse`): line by line, section by section, each cell
checked, so that a file that does not parse is refused with its name and the line."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from orchestrator.transcripts.model import (
    METRIC_KEYS,
    AgentMail,
    Block,
    MemoryWrite,
    Metrics,
    ProjectInfo,
    RawBlock,
    Subagent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    TranscriptAgent,
    TranscriptMessage,
)
from orchestrator.transcripts.scg.cells import (
    BadCell,
    expect,
    read_datetime,
    read_decimal,
    read_enum,
    read_float,
    read_int,
    read_json,
    read_offset,
    read_opt,
    read_usage,
    split_cells,
    unescape,
)
from orchestrator.transcripts.scg.layout import (
    END,
    HEADER_KEYS,
    LEGENDS,
    MAGIC,
    METRICS,
    OPTIONAL,
    ROLES,
    SECTIONS,
    VERSION,
)
from shared.errors import ScgError
from shared.models import AgentStatus, ProjectStatus


def parse(text: str, source: str = "<scg>") -> Transcript:
    """Read an scg transcript back.

    Raises:
        ScgError: the text is not a well-formed scg transcript (the message names source:line).
    """
    return _Parser(source).run(text)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.project: ProjectInfo | None = None
        self.section = -1
        self.agents: list[TranscriptAgent] = []
        self.messages: list[TranscriptMessage] = []
        self.subagents: list[Subagent] = []
        self.memory: list[MemoryWrite] = []
        self.mail: list[AgentMail] = []
        self.metrics: dict[str, Any] = {}
        self.previous: list[str] = []
        self.ended = False

    def fail(self, number: int, message: str) -> ScgError:
        return ScgError(f"{self.source}:{number}: {message}")

    def run(self, text: str) -> Transcript:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        if not lines:
            raise self.fail(1, "the file is empty; a transcript starts with '#TRANSCRIPT v1'")
        for number, line in enumerate(lines, start=1):
            try:
                self.line(number, line.removesuffix("\r"))
            except BadCell as exc:
                raise self.fail(number, str(exc)) from exc
            except ValidationError as exc:
                raise self.fail(number, exc.errors()[0]["msg"]) from exc
        if not self.ended:
            missing = ", ".join(self.required_after()) or END
            raise self.fail(len(lines), f"the file ends before {END} (missing: {missing}); is it cut short?")
        absent = [key for key in METRIC_KEYS if key not in self.metrics]
        if absent:
            raise self.fail(len(lines), f"@metrics lacks {', '.join(absent)}")
        assert self.project is not None
        try:
            return Transcript(
                project=self.project,
                agents=self.agents,
                messages=self.messages,
                subagents=self.subagents,
                memory=self.memory,
                mail=self.mail,
                metrics=Metrics(**self.metrics),
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            msg = f"{self.source}: not a valid transcript: {first['msg']}"
            raise ScgError(msg) from exc

    def line(self, number: int, line: str) -> None:
        if number == 1:
            self.project = _header(line)
            return
        expect(not self.ended, f"text after {END}")
        if not line.strip() or line == "#" or line.startswith("# "):
            return
        if line == END:
            expect(self.section == METRICS, f"{END} before {', '.join(self.required_after())}")
            self.ended = True
            return
        if line.startswith("@"):
            allowed = self.allowed_next()
            expected = " or ".join(allowed) or END
            expect(
                line in allowed,
                f"expected {expected} here, found {line[:40]!r} (sections: {' '.join(SECTIONS)})",
            )
            self.section = SECTIONS.index(line)
            return
        expect(self.section >= 0, f"expected {SECTIONS[0]} after the header")
        readers: tuple[Callable[[list[str]], None], ...] = (
            self.agent,
            self.message,
            self.subagent,
            self.memory_write,
            self.mail_item,
            self.metric,
        )
        readers[self.section](split_cells(line) if self.section < METRICS else [line])

    def allowed_next(self) -> list[str]:
        """The sections that may come next: the optional ones up to the next required one."""
        allowed = []
        for name in SECTIONS[self.section + 1 :]:
            allowed.append(name)
            if name not in OPTIONAL:
                break
        return allowed

    def required_after(self) -> list[str]:
        return [name for name in SECTIONS[self.section + 1 :] if name not in OPTIONAL]

    def agent(self, cells: list[str]) -> None:
        expect(len(cells) == 9, f"an agent line has 9 cells ({LEGENDS[0][2:]}), this one {len(cells)}")
        expect(
            read_int(cells[0], "agent index") == len(self.agents),
            f"agent index {cells[0]} out of order; expected {len(self.agents)}",
        )
        agent_id = unescape(cells[1])
        expect(all(a.id != agent_id for a in self.agents), f"agent {agent_id!r} is listed twice")
        self.agents.append(
            TranscriptAgent(
                id=agent_id,
                category=unescape(cells[2]),
                depth=read_int(cells[3], "depth"),
                parent=read_opt(cells[4]),
                status=read_enum(AgentStatus, cells[5]),
                task=read_opt(cells[6]),
                iterations=read_int(cells[7], "iterations"),
                failed_iterations=read_int(cells[8], "failed_iterations"),
            )
        )

    def agent_id(self, raw: str) -> str:
        index = read_int(raw, "agent")
        expect(0 <= index < len(self.agents), f"agent {index} is not in @agents (0..{len(self.agents) - 1})")
        return self.agents[index].id

    def message(self, cells: list[str]) -> None:
        expect(
            len(cells) >= 11, f"a message line has at least 11 cells before its blocks, this one {len(cells)}"
        )
        assert self.project is not None
        seq = read_int(cells[0], "message number")
        last = self.messages[-1].seq if self.messages else None
        expect(last is None or seq > last, f"message {seq} comes after message {last}; numbers must increase")
        expect(cells[2] in ROLES, f"role {cells[2]!r} is not u (user) or a (assistant)")
        content = self.blocks(cells[11:])
        self.messages.append(
            TranscriptMessage(
                seq=seq,
                created_at=self.project.created_at + read_offset(cells[1]),
                role=ROLES[cells[2]],
                agent=self.agent_id(cells[3]),
                iteration=read_int(cells[4], "iteration"),
                attempt=read_int(cells[5], "attempt"),
                model=self.project.model if cells[6] == "=" else read_opt(cells[6]),
                stop_reason=read_opt(cells[7]),
                usage=read_usage(cells[8]),
                cost_usd=read_decimal(cells[9], "cost"),
                duration_s=None if cells[10] == "~" else read_float(cells[10], "duration"),
                content=content,
            )
        )
        self.previous = [b.id for b in content if isinstance(b, ToolUseBlock)]

    def blocks(self, cells: list[str]) -> list[Block]:
        arity = {"T": 1, "U": 3, "R": 3, "X": 1}
        blocks: list[Block] = []
        at = 0
        while at < len(cells):
            tag = cells[at]
            expect(tag in arity, f"block {len(blocks) + 1}: {tag[:20]!r} is not a block tag (T, U, R, X)")
            args = cells[at + 1 : at + 1 + arity[tag]]
            expect(
                len(args) == arity[tag], f"block {len(blocks) + 1} ({tag}) is missing cells; an unescaped | ?"
            )
            blocks.append(self.block(tag, args))
            at += 1 + arity[tag]
        return blocks

    def block(self, tag: str, args: list[str]) -> Block:
        if tag == "T":
            return TextBlock(text=unescape(args[0]))
        if tag == "U":
            return ToolUseBlock(
                id=unescape(args[0]), name=unescape(args[1]), input=read_json(args[2], "tool input")
            )
        if tag == "X":
            return RawBlock(data=read_json(args[0], "raw block"))
        expect(args[1] in ("0", "1"), f"tool result error flag {args[1]!r} is not 0 or 1")
        return ToolResultBlock(
            tool_use_id=self.call_id(args[0]), is_error=args[1] == "1", content=unescape(args[2])
        )

    def call_id(self, raw: str) -> str:
        if not raw.startswith("^"):
            return unescape(raw)
        position = read_int(raw[1:], "tool call reference")
        if not 0 <= position < len(self.previous):
            count = len(self.previous)
            msg = f"{raw} refers to tool call {position} of the previous message, which has {count}"
            raise BadCell(msg)
        return self.previous[position]

    def subagent(self, cells: list[str]) -> None:
        expect(len(cells) == 4, f"a subagent line has 4 cells ({LEGENDS[2][2:]}), this one {len(cells)}")
        self.subagents.append(
            Subagent(
                agent=self.agent_id(cells[0]),
                iteration=None if cells[1] == "~" else read_int(cells[1], "iteration"),
                prompt=read_opt(cells[2]),
                report=read_opt(cells[3]),
            )
        )

    def memory_write(self, cells: list[str]) -> None:
        expect(len(cells) == 8, f"a memory line has 8 cells ({LEGENDS[3][2:]}), this one {len(cells)}")
        assert self.project is not None
        self.memory.append(
            MemoryWrite(
                created_at=self.project.created_at + read_offset(cells[0]),
                agent=self.agent_id(cells[1]),
                iteration=read_int(cells[2], "iteration"),
                key=unescape(cells[3]),
                version=read_int(cells[4], "version"),
                conflict=_flag(cells[5], "conflict"),
                tags=_read_list(cells[6], "tags"),
                value=unescape(cells[7]),
            )
        )

    def mail_item(self, cells: list[str]) -> None:
        legend = LEGENDS[4][2:].split("  ")[0]
        expect(len(cells) == 6, f"a mail line has 6 cells ({legend}), this one {len(cells)}")
        assert self.project is not None
        self.mail.append(
            AgentMail(
                created_at=self.project.created_at + read_offset(cells[0]),
                agent=unescape(cells[1]),
                iteration=read_int(cells[2], "iteration"),
                broadcast=_flag(cells[3], "broadcast"),
                to=_read_list(cells[4], "to"),
                text=unescape(cells[5]),
            )
        )

    def metric(self, cells: list[str]) -> None:
        key, sep, raw = cells[0].partition("=")
        expect(
            bool(sep) and key in METRIC_KEYS,
            f"{cells[0][:40]!r} is not a metric (key=value; keys: {', '.join(METRIC_KEYS)})",
        )
        expect(key not in self.metrics, f"metric {key} is given twice")
        readers: dict[str, Callable[[str, str], Any]] = {"cost_usd": read_decimal, "llm_s": read_float}
        if key == "duration_s":
            self.metrics[key] = None if raw == "~" else read_float(raw, key)
        else:
            self.metrics[key] = readers.get(key, read_int)(raw, key)


def _header(line: str) -> ProjectInfo:
    words = line.split(" ")
    expect(words[:2] == [MAGIC, VERSION], f"the first line must start with '{MAGIC} {VERSION}'")
    fields: dict[str, str] = {}
    for word in words[2:]:
        key, sep, raw = word.partition("=")
        expect(
            bool(sep) and key in HEADER_KEYS and key not in fields,
            f"header field {word[:40]!r} is unknown, repeated or not key=value",
        )
        fields[key] = raw
    missing = [k for k in HEADER_KEYS if k not in fields]
    expect(not missing, f"the header lacks {', '.join(missing)}")

    def when(key: str) -> datetime | None:
        return None if fields[key] == "~" else read_datetime(fields[key], key)

    expect(fields["created"] != "~", "the header's created time may not be ~")
    return ProjectInfo(
        id=unescape(fields["project"]),
        name=unescape(fields["name"]),
        status=read_enum(ProjectStatus, fields["status"]),
        reason=read_opt(fields["reason"]),
        model=read_opt(fields["model"]),
        created_at=read_datetime(fields["created"], "created"),
        started_at=when("started"),
        finished_at=when("finished"),
    )


def _read_list(raw: str, what: str) -> list[str]:
    try:
        value = json.loads(unescape(raw))
    except json.JSONDecodeError as exc:
        msg = f"{what} is not JSON ({exc})"
        raise BadCell(msg) from exc
    expect(
        isinstance(value, list) and all(isinstance(item, str) for item in value),
        f"{what} is not a JSON list of strings",
    )
    return value


def _flag(raw: str, what: str) -> bool:
    expect(raw in ("0", "1"), f"{what} flag {raw!r} is not 0 or 1")
    return raw == "1"
