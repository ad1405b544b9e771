"""Fixtures of the fault tests: a private Redis, a private Postgres, the stack of real
processes (``make_rig``) and a Docker socket proxy. Their machinery is :mod:`tests.support.faults`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.db import get_engine
from shared.migrate import upgrade
from tests.support.faults import PG_BIN, RECOVERY_ENV, DockerSocketProxy, PrivatePostgres, PrivateRedis, Rig
from tests.support.stack import Stack


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A scratch directory for the test's data and sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="raas-fault-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_redis(work_dir: Path) -> Iterator[PrivateRedis]:
    """A Redis server of this test's own (broker and events), stopped afterwards."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(work_dir / "redis.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A migrated PostgreSQL cluster of this test's own, on a free port, removed afterwards."""
    if PG_BIN is None:
        pytest.fail("no PostgreSQL server binaries under /usr/lib/postgresql")
    root = Path(tempfile.mkdtemp(prefix="raas-fault-pg-"))
    shutil.chown(root, "postgres", "postgres")
    server = PrivatePostgres(root)
    try:
        server.init()
        server.start()
        upgrade(server.url)
        yield server
    finally:
        get_engine(server.url).dispose()
        if server.running():
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def make_rig(
    docker_engine: str, private_redis: PrivateRedis, work_dir: Path, tmp_path: Path
) -> Iterator[Callable[..., Rig]]:
    """Start a stack on the private Redis and the given database; stopped (and its containers
    removed) afterwards, whatever happened."""
    rigs: list[Rig] = []

    def make(
        script: dict[str, Any],
        *,
        database_url: str,
        workers: int = 2,
        concurrency: int | None = 1,
        pool: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Rig:
        """``concurrency``: iterations per worker, ``pool``: threads or prefork; None starts
        ``raas worker`` with its default."""
        script_path = work_dir / "script.json"
        script_path.write_text(json.dumps(script))
        stack = Stack(
            log_dir=tmp_path / "logs",
            script=script_path,
            env={
                **RECOVERY_ENV,
                "RAAS_DATABASE_URL": database_url,
                "RAAS_BROKER_URL": private_redis.url(),
                "RAAS_REDIS_URL": private_redis.url(),
                "RAAS_DATA_DIR": str(work_dir / "data"),
                **(env or {}),
            },
        )
        rig = Rig(stack, database_url, script, work_dir)
        rigs.append(rig)
        stack.start(workers=workers, concurrency=concurrency, pool=pool)
        return rig

    yield make
    for rig in rigs:
        rig.close()


@pytest.fixture
def docker_proxy(work_dir: Path) -> Iterator[DockerSocketProxy]:
    """A cuttable Unix-socket proxy to the Docker engine (give workers its ``docker_host``)."""
    proxy = DockerSocketProxy(work_dir / "docker.sock")
    yield proxy
    proxy.close()
