"""One delivery at a time per row, released the moment its holder dies.

A delivery talks to the network for seconds; holding its row locked that long would stall the
state machine's transaction that starts its next round. A Postgres advisory lock on a connection
of its own is held instead: a second message for the same delivery (a redelivery, the reconcile
loop's resend) finds it taken and leaves the work to the holder, and a coordinator that dies
loses its connection and with it the lock, so the restarted one carries on. SQLite (one
process, the embedded engine) uses a lock in the process.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from shared.db import get_engine

_LOCAL: dict[str, threading.Lock] = {}
_LOCAL_GUARD = threading.Lock()


def _key(delivery_id: str) -> int:
    return int.from_bytes(
        hashlib.sha256(f"raas-delivery:{delivery_id}".encode()).digest()[:8], "big", signed=True
    )


@contextmanager
def held(delivery_id: str) -> Iterator[bool]:
    """Yields whether this caller holds the delivery; if not, another is delivering it now."""
    engine = get_engine()
    if engine.dialect.name != "postgresql":
        with _LOCAL_GUARD:
            lock = _LOCAL.setdefault(delivery_id, threading.Lock())
        got = lock.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                lock.release()
        return
    with engine.connect() as connection:
        got = bool(
            connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(delivery_id)}).scalar()
        )
        connection.commit()
        try:
            yield got
        finally:
            if got:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _key(delivery_id)})
                connection.commit()
