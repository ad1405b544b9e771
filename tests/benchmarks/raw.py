"""The raw baselines: a throwaway Celery app on the benchmark's broker, configured exactly like
``shared.celery_app`` (late acks, prefetch 1, task events) but with queues of its own, and a raw
Redis publisher.

- ``hop`` tasks bounce between a prefork worker (like a ``raas worker``) and a threads worker
  (like the coordinator's consumer), as an iteration's report does: worker → coordinator →
  worker. Each records when it started and when it sent the next one, in its arguments.
- ``noop`` tasks push their start time on a Redis list and do nothing else.
- ``python -m tests.benchmarks.raw publish CHANNEL INTERVAL_S COUNT`` publishes COUNT messages
  carrying their send time, like an event's ``ts``, for the pub/sub latency baseline.
- ``python -m tests.benchmarks.raw publish-committed DATABASE_URL CHANNEL INTERVAL_S COUNT`` does
  what an event's writer must do first (DESIGN.md rule 5): takes the next number from a counter
  row, stamps the time, inserts a row, commits, then publishes it; for the baseline of an event
  written to Postgres before it is published.

The broker comes from ``RAAS_BROKER_URL``, as for the product's processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import redis
from kombu import Queue

from shared.celery_app import make_celery
from shared.settings import Settings

WORKER_QUEUE = "bench.raw.worker"
COORDINATOR_QUEUE = "bench.raw.coordinator"
HOP_TO_WORKER = "bench.raw.hop_to_worker"
HOP_TO_COORDINATOR = "bench.raw.hop_to_coordinator"
NOOP = "bench.raw.noop"

app = make_celery(Settings())
app.main = "bench-raw"
app.conf.update(
    task_queues=(Queue(WORKER_QUEUE), Queue(COORDINATOR_QUEUE)),
    task_default_queue=WORKER_QUEUE,
    task_routes={
        HOP_TO_WORKER: {"queue": WORKER_QUEUE},
        HOP_TO_COORDINATOR: {"queue": COORDINATOR_QUEUE},
        NOOP: {"queue": WORKER_QUEUE},
    },
)


def use_broker(url: str) -> None:
    """Point the throwaway app (in this process) at ``url``; its workers read RAAS_BROKER_URL."""
    app.conf.broker_url = url
    _redis.cache_clear()


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url)


@app.task(name=HOP_TO_WORKER)
def hop_to_worker(stamps: list[list[float]], left: int, key: str, gap_s: float = 0.0) -> None:
    """In the worker: note the start, stay ``gap_s`` (as an iteration would, working), then
    report to the coordinator, or end the chain."""
    started = time.time()
    if left == 0:
        _redis().rpush(key, json.dumps([*stamps, [started, started]]))
        return
    time.sleep(gap_s)
    app.send_task(HOP_TO_COORDINATOR, args=[[*stamps, [started, time.time()]], left, key, gap_s])


@app.task(name=HOP_TO_COORDINATOR)
def hop_to_coordinator(stamps: list[list[float]], left: int, key: str, gap_s: float = 0.0) -> None:
    """In the coordinator: enqueue the next hop in the worker."""
    app.send_task(HOP_TO_WORKER, args=[stamps, left - 1, key, gap_s])


@app.task(name=NOOP)
def noop(key: str) -> None:
    _redis().rpush(key, time.time())


def hand_offs(stamps: list[list[float]]) -> list[float]:
    """Seconds from one worker hop's send to the next worker hop's start."""
    return [nxt[0] - prev[1] for prev, nxt in zip(stamps, stamps[1:], strict=False)]


def spawn_worker(
    name: str, queue: str, pool: str, concurrency: int, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """A Celery worker of the throwaway app, with the flags the product's worker of that kind uses."""
    args = [sys.executable, "-m", "celery", "-A", "tests.benchmarks.raw", "worker", "--queues", queue]
    args += ["--pool", pool, "--concurrency", str(concurrency), "--hostname", f"raw-{name}@%h"]
    args += ["--loglevel", "INFO"]
    if pool == "threads":  # the coordinator's consumer runs without mingle and gossip
        args += ["--without-mingle", "--without-gossip"]
    with log.open("ab") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@contextmanager
def workers(
    specs: list[tuple[str, str, str, int]], env: dict[str, str], log_dir: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Raw workers, one per (name, queue, pool, concurrency), stopped on exit; ready when yielded."""
    procs = [spawn_worker(*spec, env=env, log=log_dir / f"raw-{spec[0]}.log") for spec in specs]
    try:
        deadline = time.monotonic() + 60
        while not all(" ready." in (log_dir / f"raw-{s[0]}.log").read_text(errors="replace") for s in specs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                msg = f"raw Celery workers did not start; see {log_dir}/raw-*.log"
                raise RuntimeError(msg)
            time.sleep(0.2)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_hops(count: int, gap_s: float = 0.0, timeout_s: float = 120.0) -> list[float]:
    """One chain of ``count`` worker → coordinator → worker hand-offs; their durations in seconds.

    With ``gap_s`` the worker hop idles that long before it reports, as an iteration's work
    separates two hand-offs; the idle time is not part of a hand-off.
    """
    key = f"bench:raw:hops:{time.monotonic_ns()}"
    app.send_task(HOP_TO_WORKER, args=[[], count, key, gap_s])
    deadline = time.monotonic() + timeout_s + count * gap_s
    reply = None
    while reply is None and time.monotonic() < deadline:
        reply = _redis().blpop([key], timeout=2)  # below redis-py's default socket timeout (5 s)
    if reply is None:
        msg = f"the raw hop chain did not finish within {timeout_s}s"
        raise TimeoutError(msg)
    return hand_offs(json.loads(reply[1]))


def run_noops(count: int, timeout_s: float = 120.0) -> float:
    """Send ``count`` no-op tasks at once; tasks per second from the first send to the last start."""
    key = f"bench:raw:noops:{time.monotonic_ns()}"
    client = _redis()
    started = time.time()
    for _ in range(count):
        app.send_task(NOOP, args=[key])
    deadline = time.monotonic() + timeout_s
    while client.llen(key) < count:
        if time.monotonic() > deadline:
            msg = f"only {client.llen(key)} of {count} raw no-op tasks ran within {timeout_s}s"
            raise TimeoutError(msg)
        time.sleep(0.01)
    last = max(float(v) for v in client.lrange(key, 0, -1))
    client.delete(key)
    return count / (last - started)


def publish(url: str, channel: str, interval_s: float, count: int) -> None:
    """Publish ``count`` messages shaped like an event, each carrying its send time."""
    client = redis.Redis.from_url(url)
    filler = "x" * 240  # about the size of an iteration event's JSON
    for seq in range(1, count + 1):
        client.publish(channel, json.dumps({"seq": seq, "ts": time.time(), "data": filler}))
        time.sleep(interval_s)


def publish_committed(redis_url: str, database_url: str, channel: str, interval_s: float, count: int) -> None:
    """Like :func:`publish`, each message first written as an event is: in one transaction, the
    next number from a counter row (UPDATE ... RETURNING), the time stamped, a row inserted."""
    import psycopg

    client = redis.Redis.from_url(redis_url)
    filler = "x" * 240
    with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw_seq (id int PRIMARY KEY, seq bigint NOT NULL)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw_events (seq bigint, ts double precision, data text)"
        )
        conn.execute("INSERT INTO bench_raw_seq VALUES (1, 0) ON CONFLICT DO NOTHING")
        conn.commit()
        for _ in range(count):
            row = conn.execute("UPDATE bench_raw_seq SET seq = seq + 1 WHERE id = 1 RETURNING seq").fetchone()
            assert row is not None
            stamped = time.time()
            conn.execute("INSERT INTO bench_raw_events VALUES (%s, %s, %s)", (row[0], stamped, filler))
            conn.commit()
            client.publish(channel, json.dumps({"seq": row[0], "ts": stamped, "data": filler}))
            time.sleep(interval_s)


if __name__ == "__main__" and sys.argv[1:2] == ["publish"]:
    publish(os.environ["RAAS_REDIS_URL"], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
if __name__ == "__main__" and sys.argv[1:2] == ["publish-committed"]:
    publish_committed(
        os.environ["RAAS_REDIS_URL"], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    )
