"""Coalescing the model's text deltas into ``agent_output_chunk`` events.

A delta can be a single token; one event per token would flood Redis and the database, so
text is gathered for about 50 ms before it is sent. A timer sends it when the window closes,
so the last words before a pause (a long tool input streaming, say) are not held back until
the next delta or the end of the stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)
COALESCE_S = 0.05


class OutputCoalescer:
    def __init__(self, send: Callable[[str], None], window_s: float = COALESCE_S) -> None:
        self._send = send
        self._window_s = window_s
        self._parts: list[str] = []
        # Held while sending, so chunks go out in order and before whatever the caller emits next.
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def add(self, text: str) -> None:
        if self._window_s <= 0:
            self._send(text)
            return
        with self._lock:
            self._parts.append(text)
            if self._timer is None:
                self._timer = threading.Timer(self._window_s, self._flush_on_time)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._parts:
                text, self._parts = "".join(self._parts), []
                self._send(text)

    def _flush_on_time(self) -> None:
        # In the timer's thread nobody would see the exception; the text is lost, the run goes on.
        try:
            self.flush()
        except Exception:
            log.warning("could not send coalesced output", exc_info=True)
