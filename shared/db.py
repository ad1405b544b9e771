"""Engines and sessions, one engine per URL per process.

SQLite (the embedded mode) needs WAL and ``BEGIN IMMEDIATE`` or concurrent writers fail with
"database is locked"; Postgres needs nothing special.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.settings import get_settings

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


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for ``url`` (default: RAAS_DATABASE_URL)."""
    return _engine(url or get_settings().database_url)


def forget_engines() -> None:
    """Drop the cached engines (after the settings changed, in tests and benchmarks)."""
    _engine.cache_clear()
    _session_factory.cache_clear()


@lru_cache(maxsize=8)
def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _make_sqlite_concurrent(engine)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


@lru_cache(maxsize=8)
def _session_factory(url: str | None) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url), expire_on_commit=False)


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session committed on success and rolled back on error."""
    session = _session_factory(url)()
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
