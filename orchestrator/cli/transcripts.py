"""Commands that read what a project did: its transcript, an agent's log, a replay, its memory
bank, and pulling the final workspace into a directory.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import INSPECT, PROJECTS, JsonFlag, api, app, print_json
from orchestrator.transcripts.files import read_transcript
from orchestrator.transcripts.model import MemoryWrite, Transcript, TranscriptMessage, to_json
from shared.archive import LeftOut, unpack
from shared.errors import InvalidInput, RaasError
from shared.schemas import MemoryEntryOut

AgentOption = Annotated[
    str | None,
    typer.Option("--agent", help="Only this agent: its id, a unique prefix of it, or 'root'."),
]
TRANSCRIPT_SUFFIXES = (".scg", ".json")
VALUE_CHARS = 500  # of a memory value, unless --full


class TranscriptFormat(str, Enum):
    MD = "md"
    JSON = "json"
    SCG = "scg"


def load(source: str, agent: str | None) -> Transcript:
    """A transcript from a file (an existing path, or a name ending in .scg or .json) or a project id."""
    path = Path(source)
    if path.is_file() or path.suffix in TRANSCRIPT_SUFFIXES:
        if not path.is_file():
            msg = f"{source}: no such transcript file"
            raise InvalidInput(msg)
        transcript = read_transcript(path)
        return transcript.for_agent(agent) if agent else transcript
    return Transcript.model_validate(api().transcript(source, agent))


def _render(transcript: Transcript, fmt: TranscriptFormat) -> str:
    from orchestrator.transcripts import render, scg

    if fmt is TranscriptFormat.SCG:
        return scg.write(transcript)
    if fmt is TranscriptFormat.JSON:
        return to_json(transcript)
    return render.to_markdown(transcript)


def _write_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    if path.is_dir():
        msg = f"-o {path} is a directory; name a file"
        raise InvalidInput(msg)
    if not path.parent.is_dir():
        msg = f"-o {path}: directory {path.parent} does not exist"
        raise InvalidInput(msg)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@app.command(rich_help_panel=INSPECT)
def transcript(
    source: Annotated[
        str, typer.Argument(help="A project id, or a transcript file (.scg or .json) to read.")
    ],
    fmt: Annotated[TranscriptFormat, typer.Option("--format", "-f", help="md, json or scg.")] = (
        TranscriptFormat.MD
    ),
    agent: AgentOption = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file.")] = None,
    stats: Annotated[
        bool, typer.Option("--stats", help="Print on stderr how much smaller scg is than JSON.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Print a project's transcript, or read a transcript file back (checking that it parses)."""
    from orchestrator.transcripts import scg

    loaded = load(source, agent)
    text = _render(loaded, TranscriptFormat.JSON if as_json else fmt)
    if output is None:
        sys.stdout.write(text)
    else:
        _write_file(output, text)
    if stats:
        size = scg.sizes(loaded)
        compact_scg, pretty, compact = size["scg"], size["json"], size["json_compact"]
        sys.stderr.write(
            f"scg {compact_scg:,} bytes; JSON {pretty:,} bytes ({pretty / compact_scg:.2f}x smaller),"
            f" compact JSON {compact:,} bytes ({compact / compact_scg:.2f}x smaller)\n"
        )


@app.command(rich_help_panel=INSPECT)
def logs(
    project_id: str,
    agent: Annotated[
        str, typer.Option("--agent", help="The agent: its id, a unique prefix of it, or 'root'.")
    ] = "root",
    full: Annotated[bool, typer.Option("--full", help="Do not shorten tool calls and results.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """An agent's messages (the root agent's unless --agent), as readable text."""
    from orchestrator.transcripts.render import format_message

    loaded = Transcript.model_validate(api().transcript(project_id, agent))
    if as_json:
        print_json([m.model_dump(mode="json") for m in loaded.messages])
        return
    agents = {a.id: a for a in loaded.agents}
    names: dict[str, str] = {}
    for message in loaded.messages:
        sys.stdout.write(format_message(message, agents.get(message.agent), names, full) + "\n")


@app.command(rich_help_panel=INSPECT)
def replay(
    source: Annotated[str, typer.Argument(help="A transcript file (.scg or .json) or a project id.")],
    speed: Annotated[float, typer.Option("--speed", help="How many times faster than it happened.")] = 1.0,
    max_wait: Annotated[
        float | None, typer.Option("--max-wait", help="Never wait longer than this many seconds.")
    ] = None,
    agent: AgentOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Print a transcript's messages, memory writes and messages between agents with their
    original timing (divided by --speed)."""
    from orchestrator.transcripts.render import (
        TranscriptItem,
        format_mail,
        format_memory_write,
        format_message,
        replay,
    )

    loaded = load(source, agent)
    agents = {a.id: a for a in loaded.agents}
    names: dict[str, str] = {}

    def emit(item: TranscriptItem) -> None:
        if isinstance(item, TranscriptMessage):
            line = item.model_dump_json() if as_json else format_message(item, agents.get(item.agent), names)
        elif isinstance(item, MemoryWrite):
            shown = format_memory_write(item, agents.get(item.agent))
            line = json.dumps({"kind": "memory_write", **item.model_dump(mode="json")}) if as_json else shown
        else:
            shown = format_mail(item, agents)
            line = json.dumps({"kind": "send_message", **item.model_dump(mode="json")}) if as_json else shown
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    replay(loaded, speed, emit, max_wait_s=max_wait)


@app.command("memory", rich_help_panel=INSPECT)
def memory_bank(
    project_id: str,
    search: Annotated[
        str | None, typer.Option("--search", "-s", help='Full-text search: words, "a phrase", a or b, -word.')
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", "-t", help="Only values with this tag (repeatable).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Most keys to show (a search: 10, at most 50).")
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Do not shorten the values.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """A project's memory bank: every key with its current values and their writers, or the keys
    matching a full-text search, best first. A key in conflict shows every value kept."""
    entries = api().memory(project_id, search, tag or [], limit)
    if as_json:
        print_json(entries)
        return
    if not entries:
        sys.stdout.write(
            f"no key matches {search!r}\n" if search is not None else "the memory bank is empty\n"
        )
        return
    for number, entry in enumerate(entries, start=1):
        shown = _format_entry(MemoryEntryOut.model_validate(entry), number if search else None, full)
        sys.stdout.write(shown + "\n")


def _format_entry(entry: MemoryEntryOut, rank: int | None, full: bool) -> str:
    """A key and its current values, each with its writer, indented under the key."""
    place = f"#{rank} " if rank is not None else ""
    score = f"  (rank {entry.rank:.4g})" if entry.rank is not None else ""
    conflict = f"  IN CONFLICT: {len(entry.values)} values" if entry.conflict else ""
    lines = [f"{place}{entry.key}  version {entry.version}{conflict}{score}"]
    for value in entry.values:
        who = f"{value.agent_category or 'agent'} {value.agent_id}"
        when = f" iteration {value.iteration}" if value.iteration is not None else ""
        tags = f"  tags: {', '.join(value.tags)}" if value.tags else ""
        lines.append(f"  v{value.version} by {who}{when} at {value.written_at:%Y-%m-%d %H:%M:%S}{tags}")
        text = value.value if full or len(value.value) <= VALUE_CHARS else value.value[:VALUE_CHARS] + " …"
        lines += ["    " + line for line in text.split("\n")]
    return "\n".join(lines)


def _pull_target(directory: Path) -> Path:
    target = directory.expanduser().absolute()
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        msg = f"{directory} exists and is not a directory; pull into a new or empty directory"
        raise InvalidInput(msg)
    if target.exists() and any(target.iterdir()):
        msg = f"{directory} is not empty; pull into a new or empty directory"
        raise InvalidInput(msg)
    if not target.parent.is_dir():
        msg = f"{target.parent} does not exist; create it first or pull elsewhere"
        raise InvalidInput(msg)
    return target


@app.command(rich_help_panel=PROJECTS)
def pull(
    project_id: str,
    directory: Annotated[Path, typer.Argument(help="A new or empty directory for the files.")],
    as_json: JsonFlag = False,
) -> None:
    """Copy a project's final workspace (its main branch) into a new or empty directory.

    The files are unpacked next to the directory and moved into place at the end, so a pull that
    fails leaves nothing behind. Links that would lead outside the directory (a venv's
    bin/python3 -> /usr/bin/python3) are left out and named in one warning line.
    """
    target = _pull_target(directory)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.raas-pull-") as tmp:
        archive, staging = Path(tmp) / "workspace.tar", Path(tmp) / "files"
        api().download_workspace(project_id, archive)
        try:
            with tarfile.open(archive) as tar:
                report = unpack(tar, staging)
        except (tarfile.TarError, OSError, EOFError) as exc:
            msg = f"the workspace of {project_id} could not be unpacked ({exc}); nothing was written"
            raise RaasError(msg) from exc
        emptied = False
        try:
            if target.exists():
                target.rmdir()  # checked empty above; fails if something appeared since
                emptied = True
            staging.rename(target)
        except OSError as exc:
            if emptied:
                target.mkdir(exist_ok=True)
            msg = f"could not move the files into {directory} ({exc.strerror}); nothing was written"
            raise InvalidInput(msg) from exc
    if report.left_out:
        sys.stderr.write(_left_out_warning(report.left_out) + "\n")
    if as_json:
        left_out = [
            {"name": entry.name, "target": entry.target, "reason": entry.reason.value}
            for entry in report.left_out
        ]
        print_json(
            {"project_id": project_id, "directory": str(target), "files": report.files, "left_out": left_out}
        )
    else:
        sys.stdout.write(f"{report.files} files of {project_id} in {target}\n")


def _left_out_warning(left_out: tuple[LeftOut, ...], shown: int = 10) -> str:
    """One line naming what a pull did not write (the first ``shown``; --json lists them all)."""
    names = ", ".join(str(entry) for entry in left_out[:shown])
    more = f" and {len(left_out) - shown} more" if len(left_out) > shown else ""
    return (
        f"warning: {len(left_out)} entries not written, as links are never made to lead outside "
        f"the directory: {names}{more}"
    )
