"""Reading a transcript file back, whichever format wrote it (scg or JSON)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from orchestrator.transcripts import scg
from orchestrator.transcripts.model import Transcript
from shared.errors import InvalidInput


def read_transcript(path: Path) -> Transcript:
    """A transcript file written as scg or JSON (told apart by its first line).

    Raises:
        InvalidInput: the file cannot be read or does not parse; the message names file and line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{path}: cannot read the transcript ({exc})"
        raise InvalidInput(msg) from exc
    if text.startswith(scg.MAGIC):
        return scg.parse(text, source=str(path))
    try:
        return Transcript.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        msg = f"{path}: not a transcript (neither scg nor transcript JSON): {where}: {first['msg']}"
        raise InvalidInput(msg) from exc
