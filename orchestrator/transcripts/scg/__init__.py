"""scg, the compact transcript format: a header line, one line per agent and per message, the
subagents, the memory bank's writes and the messages between agents (two sections a file without
them leaves out, as files written before them do), and the metrics — escaped so that :func:`parse`
gives back exactly what :func:`write` was given. The format is specified in docs/transcript-scg.md.

What it holds: the file's ``layout`` (sections, legends, header keys), the ``cells`` (escaping
and the typed cells), the ``writer`` and the ``parser``. Import from here: the names below are
the package's public face (a test pins them).
"""

from __future__ import annotations

from orchestrator.transcripts.scg.layout import MAGIC
from orchestrator.transcripts.scg.parser import parse
from orchestrator.transcripts.scg.writer import sizes, write

__all__ = ["MAGIC", "parse", "sizes", "write"]
