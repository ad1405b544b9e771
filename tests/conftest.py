"""Fixtures that give every test session its own Postgres database and Redis database.

Services are real. A missing one fails the run with a message that says what to start; it
never silently skips (the test command, scripts/test.sh, starts them).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.redis_server import private_redis

PG_ADMIN_URL = os.environ.get("RAAS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _private_redis() -> str | None:
    """A Redis server of this test session's own (each xdist worker has its own session), stopped
    when the session's process exits; None without ``redis-server``.

    Celery queues have fixed names: two test sessions on one Redis would take each other's
    messages (and one's FLUSHDB would drop the other's). A private server rules that out.
    """
    if shutil.which("redis-server") is None:
        return None
    servers = ExitStack()
    atexit.register(servers.close)
    return servers.enter_context(private_redis())


REDIS_URL = os.environ.get("RAAS_TEST_REDIS_URL") or _private_redis() or "redis://127.0.0.1:6379/15"
TEST_DB = f"raas_test_{secrets.token_hex(4)}"
DATA_DIR = Path(tempfile.mkdtemp(prefix="raas-test-data-"))


def _db_url(admin_url: str, dbname: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base.replace('postgresql://', 'postgresql+psycopg://', 1)}/{dbname}"


# Set before anything imports shared.settings (read once per process) or the Celery app.
os.environ.update(
    {
        "RAAS_DATABASE_URL": _db_url(PG_ADMIN_URL, TEST_DB),
        "RAAS_REDIS_URL": REDIS_URL,
        "RAAS_BROKER_URL": REDIS_URL,
        "RAAS_DATA_DIR": str(DATA_DIR),
        "RAAS_API_TOKEN": "test-token-" + secrets.token_hex(8),
        "RAAS_HEARTBEAT_INTERVAL_S": "1",
    }
)
os.environ.pop("ANTHROPIC_API_KEY", None)
SANDBOX_IMAGE = os.environ.setdefault("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
ROOT = Path(__file__).resolve().parent.parent


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _fail(message: str) -> None:
    pytest.exit(f"{message} (scripts/test.sh starts every service)", returncode=3)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh database for this test session, migrated to head, dropped afterwards."""
    try:
        _admin(f'CREATE DATABASE "{TEST_DB}"')
    except Exception as exc:
        _fail(f"PostgreSQL at {PG_ADMIN_URL} is not usable: {exc}")
    from shared.migrate import upgrade

    upgrade(os.environ["RAAS_DATABASE_URL"])
    yield os.environ["RAAS_DATABASE_URL"]
    from shared.db import get_engine

    get_engine().dispose()
    _admin(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)')
    shutil.rmtree(DATA_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A test-only Redis database, emptied at the start of the session."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        _fail(f"Redis at {REDIS_URL} does not answer: {exc}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The sandbox image on a running Docker engine; fails (never skips) without one."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        _fail("no Docker engine answers (`docker info` fails)")
    if subprocess.run(["docker", "image", "inspect", SANDBOX_IMAGE], capture_output=True).returncode:
        _fail(f"sandbox image {SANDBOX_IMAGE} is missing; run deploy/sandbox/build-offline.sh")
    return SANDBOX_IMAGE


@pytest.fixture(scope="session")
def services(database_url: str, redis_url: str, docker_engine: str) -> dict[str, str]:
    return {"database_url": database_url, "redis_url": redis_url, "sandbox_image": docker_engine}
