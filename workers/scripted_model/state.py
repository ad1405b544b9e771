"""What a scripted model server remembers between requests: a cursor per session and the log of
every request it received.

One lock guards both. It is a ``threading.Lock`` because tests read the log from their own
thread while uvicorn serves from another; no await happens while it is held, so it never blocks
the event loop for long.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from workers.scripted_model.script import Script, Step, Variant

_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "proxy-authorization"})
REDACTED = "[redacted]"


class LoggedRequest(BaseModel):
    """One request as the server received it (``GET /_scripted/requests`` returns a list of
    these as JSON; ``LoggedRequest.model_validate`` reads them back)."""

    time: datetime
    session: str
    """The session the request belongs to (see ``sessions.session_key``), or ``"default"``."""
    turn: int | None = None
    """How many earlier requests of this session the script answered (None: not a script turn)."""
    step: int | None = None
    """Index in ``responses`` of the step that answered (None: exhausted, or not a script turn)."""
    variant: str | None = None
    """The variant whose steps answered (``step`` indexes its ``responses``); None: the script's own."""
    side_request: str | None = None
    """``"title"`` for a harness's title side-request, answered outside the script."""
    method: str
    path: str
    headers: dict[str, str] = Field(default_factory=dict)
    """Lower-cased names; the values of credential headers are replaced by ``[redacted]``."""
    body: Any = None
    """The JSON body, or the raw text when it was not JSON."""


def redact(headers: dict[str, str]) -> dict[str, str]:
    """Headers with credential values hidden but their presence kept."""
    return {name: REDACTED if name in _SECRET_HEADERS else value for name, value in headers.items()}


@dataclass(frozen=True)
class Turn:
    """A request's place in the script: its session's turn and the step that answers it."""

    number: int
    picked: tuple[int, Step] | None
    """The step and its index in the walk's ``responses``; None: the walk is exhausted."""
    variant: Variant | None
    length: int
    """Requests one walk through the steps answers (for the exhausted answer's words)."""

    @property
    def walk_key(self) -> str:
        return self.variant.name if self.variant is not None else ""


class ServerState:
    """The script, the per-session cursors and the request log, safe to share across threads."""

    def __init__(self, script: Script, *, log_path: Path | None = None) -> None:
        self._script = script
        self._log_path = log_path
        self._lock = threading.Lock()
        self._turns: dict[str, int] = {}
        self._log: list[LoggedRequest] = []
        self._arrived: dict[tuple[str, int], int] = {}
        self._released = False

    @property
    def script(self) -> Script:
        return self._script

    def take_turn(self, session: str, body: Any) -> Turn:
        """Advance ``session``'s cursor (its cursor in the variant the request matches, if any);
        return the turn taken and the step (with its index) that answers it."""
        with self._lock:
            variant = self._script.variant_for(body)
            key = session if variant is None else f"{session} [{variant.name}]"
            turn = self._turns.get(key, 0)
            self._turns[key] = turn + 1
            walk = variant or self._script
        return Turn(turn, walk.step_for(turn), variant, walk.length)

    def arrive(self, step: tuple[str, int]) -> None:
        """Count one more request that reached ``step`` (variant name or "", index) for its ``gather``."""
        with self._lock:
            self._arrived[step] = self._arrived.get(step, 0) + 1

    def arrived(self, step: tuple[str, int]) -> int:
        """Requests that reached ``step`` so far."""
        with self._lock:
            return self._arrived.get(step, 0)

    def release(self) -> None:
        """Open every ``hold``: held requests are answered, later ones are not held."""
        with self._lock:
            self._released = True

    @property
    def released(self) -> bool:
        with self._lock:
            return self._released

    def record(self, entry: LoggedRequest) -> None:
        """Keep ``entry`` in memory and, when the server has a log file, append it as a line."""
        with self._lock:
            self._log.append(entry)
            if self._log_path is not None:
                with self._log_path.open("a", encoding="utf-8") as log_file:
                    log_file.write(entry.model_dump_json() + "\n")

    def requests(self, session: str | None = None) -> list[LoggedRequest]:
        """The log so far, oldest first; only ``session``'s requests when it is given."""
        with self._lock:
            return [entry for entry in self._log if session is None or entry.session == session]

    def turns(self) -> dict[str, int]:
        """Requests answered so far per session (a variant's as ``session [variant]``)."""
        with self._lock:
            return dict(self._turns)

    def reset(self, script: Script | None = None) -> None:
        """Forget the log (in memory; the file is kept) and every cursor; optionally swap in a
        new script."""
        with self._lock:
            self._log.clear()
            self._turns.clear()
            self._arrived.clear()
            self._released = False
            if script is not None:
                self._script = script


def now() -> datetime:
    return datetime.now(UTC)
