"""A lease's ledger writes after its answers: each call's record and settlement (or release),
in the background, one at a time and in order, so that the harness has its answer's last byte
before the database is touched.

A write is held back until the lease's next call has gone upstream and its answer begun
(:meth:`Recorder.go`), or :data:`HOLD_BACK_S` has passed: a settlement and a reservation take
the project's row, and the reservation is on the next call's path while the settlement can
wait; once the harness waits on the model, the gateway has time. Until its write is done a
call's reservation keeps its worst case in the ledger, so the budget never counts on it early.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, wait
from typing import Any

log = logging.getLogger(__name__)

# How long a write waits for the lease's next call to go first (a harness that calls again at
# once, as a benchmark does; a CLI usually runs a tool in between).
HOLD_BACK_S = 0.05

Write = Callable[..., None]


class Recorder:
    """Runs one lease's writes in ``pool``, one at a time, in the order they were asked for;
    ``loop`` (the gateway's) times the held-back ones. ``on_error`` hears of a write that failed
    (it is logged; the answer it was about has been relayed)."""

    def __init__(
        self, pool: Executor, loop: asyncio.AbstractEventLoop, on_error: Callable[[Exception], None]
    ) -> None:
        self._pool = pool
        self._loop = loop
        self._on_error = on_error
        self._lock = threading.Lock()
        self._held: list[tuple[Future[None], Write, tuple[Any, ...]]] = []
        self._unfinished: list[Future[None]] = []
        self._last: Future[None] | None = None

    def later(self, write: Write, *args: Any) -> Future[None]:
        """``write(*args)`` once :meth:`go` says so, or :data:`HOLD_BACK_S` has passed."""
        done: Future[None] = Future()
        with self._lock:
            self._held.append((done, write, args))
            self._track(done)
        # No pool thread waits meanwhile: the loop's timer lets it go (it, and those before it).
        self._loop.call_soon_threadsafe(self._loop.call_later, HOLD_BACK_S, self.go, done)
        return done

    def now(self, write: Write, *args: Any) -> Future[None]:
        """``write(*args)`` after the writes asked for before it, holding nothing back."""
        done: Future[None] = Future()
        with self._lock:
            self._held.append((done, write, args))
            self._track(done)
        self.go()
        return done

    def go(self, until: Future[None] | None = None) -> None:
        """Let the held-back writes run (the next call's answer has begun, or someone waits), or
        only those up to ``until``'s (its time has come)."""
        with self._lock:
            count = len(self._held)
            if until is not None:
                count = next((i + 1 for i, (done, _, _) in enumerate(self._held) if done is until), 0)
            going, self._held = self._held[:count], self._held[count:]
            for done, write, args in going:
                self._pool.submit(self._run, self._last, done, write, args)
                self._last = done

    def busy(self) -> bool:
        """Whether some write has not finished."""
        with self._lock:
            return any(not done.done() for done in self._unfinished)

    def wait(self) -> None:
        """Run every write asked for so far and wait until they are done (not on the event loop).

        The held-back ones run here, in the caller's thread: a pool thread waiting for writes
        queued behind it in its own pool could wait for ever once every thread does.
        """
        with self._lock:
            held, self._held = self._held, []
            before = self._last
            if held:
                self._last = held[-1][0]
            unfinished = list(self._unfinished)
        for done, write, args in held:
            self._run(before, done, write, args)
            before = done
        wait(unfinished)

    def _track(self, done: Future[None]) -> None:
        self._unfinished = [f for f in self._unfinished if not f.done()]
        self._unfinished.append(done)

    def _run(
        self, before: Future[None] | None, done: Future[None], write: Write, args: tuple[Any, ...]
    ) -> None:
        if before is not None:
            # Submitted earlier, so the pool has started it (or finished it): no deadlock.
            wait([before])
        try:
            write(*args)
        except Exception as exc:
            log.exception("a gateway call could not be recorded")
            self._on_error(exc)
        finally:
            done.set_result(None)
