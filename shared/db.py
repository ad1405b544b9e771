"""Engines and sessions, one engine per URL per process.

SQLite (the embedded mode) needs WAL and ``BEGIN IMMEDIATE`` or concurrent writers fail with
"database is locked"; Postgres needs nothing special.

A process whose threads each use the database (a threads worker: one iteration per thread)
sizes the pool for them with :func:`size_pools` before its first session, so that no iteration
waits for a connection another one holds.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.settings import Settings, get_settings

log = logging.getLogger(__name__)


def _make_sqlite_concurrent(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let us issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


DEFAULT_POOL_SIZE = 5
# lru_cache does not hold other callers back while it makes a value: the first sessions of
# many threads at once would each make an engine (and keep its connections) for the same URL.
_making = threading.Lock()
# How many threads of this process use the database at once (size_pools).
_threads: list[int] = [1]
# Every engine _engine made, so that dropping the cache also closes their pooled connections
# (a dropped engine's connections were otherwise closed by the garbage collector, with a
# ResourceWarning, whenever it came by).
_made: list[Engine] = []


def _drop_engines() -> None:
    _engine.cache_clear()
    _session_factory.cache_clear()
    while _made:
        _made.pop().dispose()


def size_pools(threads: int) -> None:
    """Size this process's connection pools for ``threads`` threads using the database at once.

    Unless RAAS_DB_POOL_SIZE says otherwise, each engine then keeps up to ``threads``
    connections for reuse (never fewer than 5); they are opened only when needed.
    """
    with _making:
        _threads[0] = threads
        _drop_engines()


def pool_size(settings: Settings) -> int:
    """Connections an engine of this process keeps for reuse."""
    return settings.db_pool_size or max(DEFAULT_POOL_SIZE, _threads[0])


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for ``url`` (default: RAAS_DATABASE_URL)."""
    with _making:
        return _engine(url or get_settings().database_url)


def forget_engines() -> None:
    """Drop the cached engines and close their connections (after the settings changed, in
    tests and benchmarks)."""
    with _making:
        _drop_engines()


@lru_cache(maxsize=8)
def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _make_sqlite_concurrent(engine)
    else:
        settings = get_settings()
        engine = create_engine(
            url, pool_pre_ping=True, pool_size=pool_size(settings), max_overflow=settings.db_max_overflow
        )
    _made.append(engine)
    return engine


@lru_cache(maxsize=8)
def _session_factory(url: str | None) -> sessionmaker[Session]:
    return sessionmaker(bind=_engine(url or get_settings().database_url), expire_on_commit=False)


def _sessions(url: str | None) -> sessionmaker[Session]:
    with _making:
        return _session_factory(url)


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session committed on success and rolled back on error."""
    session = _sessions(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


T = TypeVar("T")
P = ParamSpec("P")
RETRY_FOR_S = 90.0


def _disconnected(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


def survives_restarts(func: Callable[P, T]) -> Callable[P, T]:
    """Retry ``func`` while the database is unreachable (a restart), for up to RETRY_FOR_S.

    For the worker's writes: a reply the model has already sent (and billed) must still be
    recorded once the database is back, not lost with the connection.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.5
        while True:
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                if not _disconnected(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("database unreachable in %s; retrying in %.1fs", func.__name__, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    return wrapper
