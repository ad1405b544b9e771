"""What the end-to-end benchmarks share: a throwaway Postgres database and Redis database, the
stack of real ``raas`` processes on them, project submission through the API, Postgres's own
counters and worker memory.

Nothing is left behind: the database is dropped, the run's own Redis server stopped, every
process stopped and the data directory removed, also when a benchmark fails half-way.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import psycopg
import redis

from orchestrator.cli.client import ApiClient
from shared.db import forget_engines
from shared.migrate import upgrade
from shared.settings import get_settings
from tests.support.redis_server import private_redis
from tests.support.stack import Stack
from workers.sandbox.sweeper import cluster_id

PG_ADMIN_URL = os.environ.get("RAAS_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
# Unset: each run starts a Redis server of its own (two benchmarks at once then never meet).
SHARED_REDIS_URL = os.environ.get("RAAS_BENCH_REDIS_URL")

#: A model that answers every request at once and never completes the task: every iteration
#: is one LLM call, and the project runs until max_iterations.
NEVER_DONE_SCRIPT = {
    "responses": [{"content": [{"type": "text", "text": "working"}]}],
    "when_exhausted": "repeat_last",
}

# The counters of pg_stat_database that say how much a workload asked of Postgres.
PG_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


@dataclass
class Services:
    """A fresh, migrated Postgres database and an empty Redis database, for one run."""

    dbname: str
    database_url: str
    redis_url: str

    def pg(self) -> psycopg.Connection[Any]:
        """An autocommit connection to the benchmark database (for reading results)."""
        return psycopg.connect(self.database_url.replace("+psycopg", ""), autocommit=True)

    def counters(self) -> dict[str, int]:
        """pg_stat_database's counters for the benchmark database, read from another database.

        Backends publish their counts when they go idle (at most every second, and within
        ten seconds of going idle), so read after the workload has been quiet for that long.
        """
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT {', '.join(PG_COUNTERS)} FROM pg_stat_database WHERE datname = %s",
                (self.dbname,),
            ).fetchone()
        assert row is not None
        return dict(zip(PG_COUNTERS, (int(v) for v in row), strict=True))

    def table_counters(self) -> dict[str, int]:
        """Where the rows behind ``tup_returned`` and ``tup_fetched`` come from: per table
        ``TABLE.seq_scan``, ``.seq_tup_read``, ``.idx_scan``, ``.idx_tup_fetch`` (heap rows), and
        per index ``INDEX.idx_scan``, ``.idx_tup_read`` (index entries).

        The views are per database, so this costs one transaction in the benchmark database.
        """
        with self.pg() as conn:
            tables = conn.execute(
                "SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_user_tables"
            ).fetchall()
            indexes = conn.execute(
                "SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes"
            ).fetchall()
        counters = {}
        for table, *values in tables:
            names = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch")
            counters.update({f"{table}.{name}": int(v) for name, v in zip(names, values, strict=True)})
        for index, scans, entries in indexes:
            counters.update({f"{index}.idx_scan": int(scans), f"{index}.idx_tup_read": int(entries)})
        return counters


def _admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def redis_for_run() -> Iterator[str]:
    """The run's Redis: a server of its own, or ``RAAS_BENCH_REDIS_URL``'s database, flushed at
    both ends."""
    if SHARED_REDIS_URL is None:
        with private_redis() as url:
            yield url
        return
    bus = redis.Redis.from_url(SHARED_REDIS_URL)
    try:
        bus.flushdb()
        yield SHARED_REDIS_URL
    finally:
        bus.flushdb()
        bus.close()


@contextmanager
def services() -> Iterator[Services]:
    dbname = f"raas_bench_{secrets.token_hex(4)}"
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    url = f"{base.replace('postgresql://', 'postgresql+psycopg://', 1)}/{dbname}"
    _admin(f'CREATE DATABASE "{dbname}"')
    try:
        with redis_for_run() as redis_url:
            # For code of the product run in this process too (it reads the settings once).
            os.environ.update(
                {"RAAS_DATABASE_URL": url, "RAAS_REDIS_URL": redis_url, "RAAS_BROKER_URL": redis_url}
            )
            get_settings.cache_clear()  # importing the Celery app has read them already
            forget_engines()
            upgrade(url)
            yield Services(dbname, url, redis_url)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@contextmanager
def stack(
    svc: Services,
    workdir: Path,
    script: dict[str, Any],
    workers: int,
    concurrency: int,
    env: dict[str, str] | None = None,
    left_behind: list[str] | None = None,
    pool: str | None = None,
) -> Iterator[Stack]:
    """The scripted model, a coordinator and ``workers`` worker processes (``pool``: threads or
    prefork; None: ``raas worker``'s default), on ``svc``.

    Once they have stopped, the sandboxes of this run still there are removed, and their names
    added to ``left_behind``.
    """
    os.environ.pop("ANTHROPIC_API_KEY", None)  # the scripted model answers, never the real API
    env = {
        "RAAS_DATABASE_URL": svc.database_url,
        "RAAS_BROKER_URL": svc.redis_url,
        "RAAS_REDIS_URL": svc.redis_url,
        "RAAS_DATA_DIR": str(workdir / "data"),
        "RAAS_API_TOKEN": "bench-" + secrets.token_hex(8),
        **(env or {}),
    }
    script_path = workdir / "script.json"
    script_path.write_text(json.dumps(script))
    running = Stack(log_dir=workdir / "logs", script=script_path, env=env)
    try:
        running.start(workers=workers, concurrency=concurrency, pool=pool)
        yield running
    except BaseException:
        print(f"the stack's logs:\n{running.logs()}", file=sys.stderr)
        raise
    finally:
        running.stop()
        names = remove_sandboxes(svc)
        if names:
            print(f"removed {len(names)} sandbox(es) the stopped stack left behind", file=sys.stderr)
        if left_behind is not None:
            left_behind.extend(names)


def remove_sandboxes(svc: Services) -> list[str]:
    """Remove every container of this run's cluster (labelled with its database); their names."""
    label = f"label=raas.cluster={cluster_id(svc.database_url)}"
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", label, "--format", "{{.Names}}"], capture_output=True, text=True
    )
    names = listed.stdout.split()
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)
    return names


@contextmanager
def workdir() -> Iterator[Path]:
    """A scratch directory (data and logs); RAAS_BENCH_KEEP=1 keeps it, to read the logs."""
    path = Path(tempfile.mkdtemp(prefix="raas-bench-"))
    try:
        yield path
    finally:
        if os.environ.get("RAAS_BENCH_KEEP"):
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)


def api(running: Stack) -> ApiClient:
    return ApiClient(running.env["RAAS_COORDINATOR_URL"], running.env["RAAS_API_TOKEN"], timeout_s=120)


def create_projects(running: Stack, count: int, toml: str, prefix: str) -> list[str]:
    """Create (not start) ``count`` projects with this raas.toml, a few requests at a time."""
    client = api(running)
    archive = project_archive(toml)
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda i: client.create_project(archive, f"{prefix}-{i}")["id"], range(count)))


def call_all(running: Stack, verb: str, project_ids: list[str]) -> None:
    """POST /v1/projects/ID/``verb`` (start, pause, resume, stop) for every project."""
    client = api(running)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: client.request("POST", f"/v1/projects/{p}/{verb}"), project_ids))


def raas_toml(max_iterations: int, limit_usd: float = 5.0) -> str:
    """A project that runs to ``max_iterations``: the model changes nothing, so the circuit
    breaker's no-progress rule (3 in a row by default) is lifted."""
    return (
        f"max_iterations = {max_iterations}\nmax_turns = 1\n"
        f"[budget]\nlimit_usd = {limit_usd}\n"
        f"[circuit_breaker]\nmax_no_progress = {max_iterations + 1}\n"
    )


def project_archive(raas_toml: str, prompt: str = "Keep working; never finish.\n") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in (("PROMPT.md", prompt), ("raas.toml", raas_toml)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def wait_workers_ready(running: Stack, workers: int, timeout_s: float = 60.0) -> None:
    """Until every worker's log says it is ready (Celery prints "ready." once it consumes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        logs = [(running.log_dir / f"worker{i}.log").read_text(errors="replace") for i in range(workers)]
        if all(" ready." in text for text in logs):
            return
        for name, proc in running.procs.items():
            if proc.poll() is not None:
                msg = f"{name} exited with {proc.returncode}:\n{running.logs()}"
                raise RuntimeError(msg)
        time.sleep(0.2)
    msg = f"workers not ready within {timeout_s}s:\n{running.logs()}"
    raise TimeoutError(msg)


def group_memory_kib(pgid: int, measure: Literal["Rss", "Pss"]) -> int:
    """Memory of every process in the process group ``pgid`` (a worker and its prefork children),
    in KiB, from /proc/PID/smaps_rollup.

    ``Rss`` counts a page shared by n processes n times; ``Pss`` counts it once, split among them.
    A threads worker forks children (git, on their way to exec) that each show its whole Rss for a
    moment: summed Rss then swung between ~240 and ~1400 MiB for a worker of ~240 MiB.
    """
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Field 5 is the process group; the command name (field 2) may hold spaces.
            if int(stat.rpartition(")")[2].split()[2]) != pgid:
                continue
            for line in (entry / "smaps_rollup").read_text().splitlines():
                if line.startswith(f"{measure}:"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return total


def parse_ts(value: str | datetime) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(value)).timestamp()


def percentile(samples: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (nearest rank)."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def machine() -> str:
    cpus = os.cpu_count()
    with Path("/proc/meminfo").open() as meminfo:
        mem_gib = int(meminfo.readline().split()[1]) / 1024 / 1024
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    return f"{cpus} cores ({model}), {mem_gib:.0f} GiB, Linux {kernel}"
