"""Coalescing the model's text deltas into ``agent_output_chunk`` events.

A delta can be a single token; one event per token would flood Redis and the database, so
text is gathered for about 50 ms before it is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable

COALESCE_S = 0.05


class OutputCoalescer:
    def __init__(self, send: Callable[[str], None], window_s: float = COALESCE_S) -> None:
        self._send = send
        self._window_s = window_s
        self._parts: list[str] = []
        self._since = 0.0

    def add(self, text: str) -> None:
        if not self._parts:
            self._since = time.monotonic()
        self._parts.append(text)
        if time.monotonic() - self._since >= self._window_s:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            text, self._parts = "".join(self._parts), []
            self._send(text)
