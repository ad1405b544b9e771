"""Many projects at once: throughput, Postgres work per iteration, loss, budgets, event delivery
and worker memory, each against a raw baseline measured in this run.

1. Raw Celery: ``--noops`` no-op tasks through the same broker and the same workers
   (``--workers`` processes of ``--concurrency``, ``--pool`` prefork or threads), as tasks per
   second, and their RSS.
2. Load: ``--projects`` projects start at once; the scripted model answers at once and never
   completes, so each runs exactly ``--iterations`` iterations and fails on max_iterations.
   Iterations per second from the first start to the last project's end. A follower in this
   process, subscribed to every project's Redis channel, takes each event's delay from its
   ``ts`` (the row's timestamp) to its receipt; meanwhile a raw publisher process sends
   messages of the same size with their send time to the same subscriber, and another one
   writes each message to Postgres first, as an event's writer does (a counter row's next
   number, the time stamped, a row inserted, commit), then publishes it.
   ``--follow-fraction`` (0.1) of them are submitted from a repository on a loopback git server
   with a ``[delivery]`` to it and the fake forge (tests/benchmarks/delivering.py): they run as
   many iterations, complete, push, open a pull request and follow it, polled by the
   coordinator's poller every ``--poll-s`` (60, the product's default) seconds; a load project
   ends when it has failed, or been delivered. ``--follow-fraction 0`` is the benchmark before issue #25.
3. History: ``--long-projects`` projects run to iteration ``--long-iterations``; Postgres's own
   counters (pg_stat_database) over their first ``--window`` iterations and over their last
   ``--window``, per iteration (see tests/benchmarks/history.py). Constant work per iteration
   gives a late/early ratio of 1.

Then the database is checked: no iteration lost or run twice, every project ended as expected,
every event sequence gapless, every budget kept and every reservation released; every delivering
project opened one pull request and still follows it, polled with 304s. The pull requests opened
and the forge's answers (200 vs 304) are printed under the table.

Run: ``.venv/bin/python -m tests.benchmarks.bench_load [--projects N] [--iterations N] [--workers N]
[--concurrency N] [--pool prefork|threads] [--follow-fraction F] [--poll-s S]``. Needs Postgres, Redis,
Docker and the sandbox image; it makes its own database (dropped at the end) and a Redis server of its
own (stopped at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from cryptography.fernet import Fernet
from psycopg.rows import dict_row

from tests.benchmarks import delivering, history, raw, rig
from tests.benchmarks.follower import RAW_CHANNEL, RAW_COMMITTED_CHANNEL, Follower
from tests.benchmarks.history import History
from tests.benchmarks.table import Check, Figure, Table
from tests.support.stack import Stack

TERMINAL = ["completed", "failed", "stopped"]
ENDED = [*TERMINAL, "delivered"]  # a delivering project ends its load once its PR is followed


@dataclass
class Measured:
    """Everything one run measured, before it is put in a table."""

    args: argparse.Namespace
    raw_rate: float = 0.0
    raw_rss_kib: int = 0
    rss_kib: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float, int] = (0.0, 0.0, 0)  # first start, last end, iterations
    latency: dict[str, list[float]] = field(default_factory=dict)
    raw_latency: dict[str, list[float]] = field(default_factory=dict)
    history: History | None = None
    checks: list[Check] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    follow_ids: list[str] = field(default_factory=list)
    forge: dict[str, Counter[str]] = field(default_factory=dict)  # the forge's answers, by when


@dataclass
class Clock:
    last: float = field(default_factory=time.monotonic)

    def lap(self, measured: Measured, name: str) -> None:
        now = time.monotonic()
        measured.phases.append(f"{name} {now - self.last:.0f} s")
        self.last = now


def worker_rss_kib(running: Stack, workers: int) -> int:
    """RSS of every worker process group (each worker and its prefork children)."""
    return sum(rig.group_memory_kib(running.procs[f"worker{i}"].pid, "Rss") for i in range(workers))


def raw_throughput(running: Stack, args: argparse.Namespace) -> tuple[float, int]:
    """Raw no-op tasks per second through ``args.workers`` raw workers, and their total RSS."""
    raw.use_broker(running.env["RAAS_BROKER_URL"])
    specs = [(f"worker{i}", raw.WORKER_QUEUE, args.pool, args.concurrency) for i in range(args.workers)]
    with raw.workers(specs, running.env, running.log_dir) as procs:
        raw.run_noops(100)  # warm-up: every prefork child imports and connects on its first task
        rate = raw.run_noops(args.noops)
        rss = sum(rig.group_memory_kib(proc.pid, "Rss") for proc in procs)
    return rate, rss


def run_load(svc: rig.Services, running: Stack, follower: Follower, ids: list[str], m: Measured) -> float:
    """Start every project at once and wait until all have ended; the time they had."""
    publishers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.raw", "publish", RAW_CHANNEL, "0.02", "1000000"],
            env=running.env,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.benchmarks.raw",
                "publish-committed",
                svc.database_url,
                RAW_COMMITTED_CHANNEL,
                "0.02",
                "1000000",
            ],
            env=running.env,
        ),  # fmt: skip
    ]
    peak = 0
    deadline = time.monotonic() + 120 + len(ids) * m.args.iterations * 2
    try:
        rig.call_all(running, "start", ids)
        with svc.pg() as conn:
            while True:
                peak = max(peak, worker_rss_kib(running, m.args.workers))
                row = conn.execute(
                    "SELECT count(*) FROM projects WHERE id = ANY(%s) AND status = ANY(%s)", (ids, ENDED)
                ).fetchone()
                ended = row[0] if row else 0
                if ended == len(ids):
                    break
                if time.monotonic() > deadline:
                    msg = f"only {ended} of {len(ids)} projects ended in time"
                    raise TimeoutError(msg)
                time.sleep(1)
    finally:
        for publisher in publishers:
            publisher.terminate()
            publisher.wait()
    m.rss_kib["peak under load"] = peak
    return time.time()


def load_span(svc: rig.Services, project_ids: list[str]) -> tuple[float, float, int]:
    """The load's first start, its last end (event timestamps: a delivering project's end is its
    ``project_delivered``) and how many iterations ran."""
    with svc.pg() as conn:
        row = conn.execute(
            "SELECT min(ts) FILTER (WHERE type = 'project_started'), "
            "max(ts) FILTER (WHERE type IN "
            "('project_completed', 'project_failed', 'project_stopped', 'project_delivered')), "
            "count(*) FILTER (WHERE type IN ('iteration_complete', 'iteration_error')) "
            "FROM events WHERE project_id = ANY(%s)",
            (project_ids,),
        ).fetchone()
    assert row is not None
    return row[0].timestamp(), row[1].timestamp(), int(row[2])


def measure(svc: rig.Services, workdir: Path, args: argparse.Namespace) -> Measured:
    m, clock = Measured(args), Clock()
    # The reconcile loop's passes would land in the windows by the clock, not by the iteration;
    # its cost is measured pass by pass instead (history.reconcile_pass).
    env = {"RAAS_RECONCILE_INTERVAL_S": "3600", "RAAS_WARM_POOL_SIZE": str(args.warm_pool)}
    following = round(args.projects * args.follow_fraction)
    if following:
        env["RAAS_SECRET_KEY"] = Fernet.generate_key().decode()  # for the stored git credential
    left_behind: list[str] = []
    stack = rig.stack(
        svc, workdir, rig.NEVER_DONE_SCRIPT, args.workers, args.concurrency, env, left_behind, args.pool
    )
    with contextlib.ExitStack() as contexts:
        remote = contexts.enter_context(delivering.remote(workdir)) if following else None
        running = contexts.enter_context(stack)
        rig.wait_workers_ready(running, args.workers)
        clock.lap(m, "start the stack")
        m.raw_rate, m.raw_rss_kib = raw_throughput(running, args)
        clock.lap(m, "raw Celery baseline")
        m.rss_kib["idle"] = worker_rss_kib(running, args.workers)
        load_ids = rig.create_projects(
            running, args.projects - following, rig.raas_toml(args.iterations), "load"
        )
        if remote is not None:
            remote.store_credential(running)
            toml = remote.toml(args.iterations, args.poll_s)
            m.follow_ids = remote.create_projects(running, following, toml, "follow")
            load_ids = delivering.interleave(m.follow_ids, load_ids)
        # One more than measured: the last window must end before any project does.
        long_ids = rig.create_projects(
            running, args.long_projects, rig.raas_toml(args.long_iterations + 1), "long"
        )
        clock.lap(m, f"create {args.projects + args.long_projects} projects")
        follower = Follower(svc.redis_url)
        follower.start(load_ids + long_ids)
        load_end = run_load(svc, running, follower, load_ids, m)
        clock.lap(m, "load")
        m.rss_kib["after the load"] = worker_rss_kib(running, args.workers)
        if remote is not None:
            m.forge["after the load"] = remote.forge_counts()
        m.history = history.early_and_late(
            svc, running, follower, long_ids, args.long_iterations, args.window
        )
        clock.lap(m, "history")
        m.rss_kib["at the end"] = worker_rss_kib(running, args.workers)
        follower.stop()
        if remote is not None:
            m.forge["at the end"] = remote.forge_counts()
            m.checks.extend(remote.checks(svc, m.follow_ids))
    m.load = load_span(svc, load_ids)
    m.latency, m.raw_latency = follower.latencies(until=load_end)
    m.checks = [*integrity_checks(svc, load_ids, long_ids, args.iterations, m.follow_ids), *m.checks]
    m.checks.append(delivery_check(svc, follower, load_ids + long_ids))
    m.checks.append(
        Check(
            "no sandbox left after the workers stopped",
            not left_behind,
            f"{len(left_behind)} left (removed): {', '.join(left_behind[:4])}" if left_behind else "none",
        )
    )
    return m


CHECK_SQL = """
SELECT p.id, p.status, coalesce(p.pause_reason || ': ', '') || p.status_reason AS reason,
  p.spent_usd AS spent, p.budget_limit_usd AS limit_,
  p.reserved_usd AS reserved, p.last_event_seq AS last_seq,
  (SELECT count(*) FROM iterations i WHERE i.project_id = p.id) AS rows,
  (SELECT count(DISTINCT number) FROM iterations i WHERE i.project_id = p.id) AS numbers,
  (SELECT coalesce(max(attempt), 0) FROM iterations i WHERE i.project_id = p.id) AS max_attempt,
  (SELECT count(*) FROM iterations i WHERE i.project_id = p.id AND i.status <> 'succeeded') AS not_ok,
  (SELECT count(*) FROM events e WHERE e.project_id = p.id) AS events,
  (SELECT count(DISTINCT seq) FROM events e WHERE e.project_id = p.id) AS seqs,
  (SELECT coalesce(max(seq), 0) FROM events e WHERE e.project_id = p.id) AS max_seq,
  (SELECT count(*) FROM events e WHERE e.project_id = p.id AND e.type = 'iteration_started') AS started,
  (SELECT count(*) FROM events e WHERE e.project_id = p.id AND e.type = 'iteration_complete') AS complete
FROM projects p WHERE p.id = ANY(%s)
"""
CHECKS = (
    "ended as expected",
    "no iteration lost or run twice",
    "event seqs gapless",
    "budget kept (spent <= limit)",
    "every reservation released",
)


def integrity_checks(
    svc: rig.Services, load_ids: list[str], long_ids: list[str], iterations: int, follow_ids: list[str]
) -> list[Check]:
    """What the database says about loss, duplicates, event sequences and budgets (a load project
    of ``follow_ids`` ends delivered, following its PR; any other failed on max_iterations)."""
    with svc.pg() as conn, conn.cursor(row_factory=dict_row) as cursor:
        rows = [SimpleNamespace(**row) for row in cursor.execute(CHECK_SQL, (load_ids + long_ids,))]
    problems: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        is_load = r.id in load_ids
        expected = ("failed", True) if is_load else ("stopped", False)
        if r.id in follow_ids:
            expected = ("delivered", False)
        if (r.status, "max_iterations" in (r.reason or "")) != expected:
            problems[CHECKS[0]].append(f"{r.id}: {r.status} ({r.reason})")
        counts = (r.rows, r.numbers, r.started, r.complete)
        if (is_load and set(counts) != {iterations}) or len(set(counts)) > 1 or r.max_attempt > 1 or r.not_ok:
            problems[CHECKS[1]].append(
                f"{r.id}: rows, numbers, started, complete {counts}; attempt {r.max_attempt}"
            )
        if not r.events == r.seqs == r.max_seq == r.last_seq:
            problems[CHECKS[2]].append(
                f"{r.id}: {r.events} events, {r.seqs} seqs, max {r.max_seq}/{r.last_seq}"
            )
        if r.spent > r.limit_:
            problems[CHECKS[3]].append(f"{r.id}: spent {r.spent} of {r.limit_}")
        if r.reserved != 0:
            problems[CHECKS[4]].append(f"{r.id}: {r.reserved} still reserved")
    checks = [Check(name, not problems[name], _summary(problems[name], len(rows))) for name in CHECKS]
    expected = len(load_ids) + len(long_ids)
    checks.append(Check("every project found", len(rows) == expected, f"{len(rows)} of {expected}"))
    return checks


def _summary(problems: list[str], projects: int) -> str:
    if not problems:
        return f"all {projects} projects"
    return f"{len(problems)} problem(s), e.g. " + "; ".join(problems[:3])


def delivery_check(svc: rig.Services, follower: Follower, project_ids: list[str]) -> Check:
    """Every event after ``project_created`` (published before the follower subscribed) arrived live."""
    with svc.pg() as conn:
        expected = dict(
            conn.execute(
                "SELECT project_id, count(*) FROM events "
                "WHERE project_id = ANY(%s) AND seq > 1 GROUP BY project_id",
                (project_ids,),
            ).fetchall()
        )
    received = follower.counts()
    missing = {p: n - received.get(p, 0) for p, n in expected.items() if received.get(p, 0) != n}
    detail = f"{sum(received.values())} of {sum(expected.values())} events"
    if missing:
        detail += f"; differences in {len(missing)} projects, e.g. {list(missing.items())[:3]}"
    return Check("every event delivered live", not missing, detail)


PG_FIGURES = (
    ("transactions", ("xact_commit", "xact_rollback")),
    ("rows read by scans (tup_returned)", ("tup_returned",)),
    ("rows fetched (tup_fetched)", ("tup_fetched",)),
    ("rows written (ins+upd+del)", ("tup_inserted", "tup_updated", "tup_deleted")),
)


def table_of(m: Measured) -> Table:
    assert m.history is not None
    early, late = m.history.early, m.history.late
    first, last, iterations = m.load
    table = Table(checks=m.checks)
    table.figures.append(
        Figure(
            "throughput",
            iterations / (last - first),
            m.raw_rate,
            "/s",
            "raw Celery no-op tasks/s, same workers",
        )
    )
    for name, counters in PG_FIGURES:
        table.figures.append(
            Figure(
                f"Postgres {name} per iteration",
                late.per_iteration(*counters),
                early.per_iteration(*counters),
                "/iter",
                f"same, {early.name} (ours: {late.name})",
                goal_min=0.8,
                goal_max=1.25,
            )
        )
    ours = [s for samples in m.latency.values() for s in samples]
    for pct in (50, 95, 99):
        table.figures.append(
            Figure(
                f"event delivery p{pct} (row ts -> follower)",
                rig.percentile(ours, pct) * 1000,
                rig.percentile(m.raw_latency[RAW_CHANNEL], pct) * 1000,
                "ms",
                f"raw Redis publish -> receive, p{pct}",
                goal_max=5 if pct == 99 else None,
            )
        )
    for pct in (50, 99):
        table.figures.append(
            Figure(
                f"event delivery p{pct} (row ts -> follower)",
                rig.percentile(ours, pct) * 1000,
                rig.percentile(m.raw_latency[RAW_COMMITTED_CHANNEL], pct) * 1000,
                "ms",
                f"raw Postgres write+commit, then publish, p{pct}",
            )
        )
    table.figures.append(
        Figure(
            "worker RSS, peak under load",
            m.rss_kib["peak under load"] / 1024,
            m.raw_rss_kib / 1024,
            "MiB",
            "raw Celery workers, same pools, after burst",
        )
    )
    return table


def print_report(m: Measured, table: Table) -> None:
    assert m.history is not None
    early, late = m.history.early, m.history.late
    a, (first, last, iterations) = m.args, m.load
    print(
        f"load benchmark: {a.projects} projects x {a.iterations} iterations at once; then {a.long_projects} "
        f"projects to iteration {a.long_iterations}; {a.workers} workers x concurrency {a.concurrency} "
        f"({a.pool}, warm pool {a.warm_pool}), one coordinator"
    )
    print(f"machine: {rig.machine()}")
    print(f"load: {iterations} iterations in {last - first:.1f} s")
    if m.follow_ids:
        forge = "; ".join(
            f"{when}: " + ", ".join(f"{answer} x {n}" for answer, n in sorted(counts.items()))
            for when, counts in m.forge.items()
        )
        print(
            f"delivering: {len(m.follow_ids)} of {a.projects} load projects ({a.follow_fraction:.0%}) opened "
            f"and followed a PR, polled every {a.poll_s:g} s; forge answers (method status x n): {forge}"
        )
    table.print()
    print(
        f"\nwindows: {early.name}: {early.iterations} iterations in {early.duration_s:.0f} s; "
        f"{late.name}: {late.iterations} iterations in {late.duration_s:.0f} s"
    )
    print(
        "event delivery by type under load, p50/p95 ms: "
        + ", ".join(
            f"{kind} {rig.percentile(v, 50) * 1000:.1f}/{rig.percentile(v, 95) * 1000:.1f}"
            for kind, v in sorted(m.latency.items())
        )
    )
    rss = ", ".join(f"{name} {kib / 1024:.0f} MiB" for name, kib in m.rss_kib.items())
    print(f"worker RSS ({a.workers} workers and their children): {rss}")
    print(f"rows read per iteration, {late.name}, by table (pg_stat_user_tables):")
    print("\n".join(history.by_table(late)))
    grown = history.growth(early, late)
    if grown:
        print("rows read per iteration that grew with history:")
        print("\n".join(grown))
    for cost in m.history.reconcile:
        tables = ", ".join(f"{c} {n}" for c, n in sorted(cost.by_table.items()))
        print(
            f"one reconcile pass with {cost.finished_iterations} finished iterations in the database: "
            f"{cost.rows_read} rows read ({tables})"
        )
    print(f"phases: {', '.join(m.phases)}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--projects", type=int, default=200, help="projects running at once")
    parser.add_argument("--iterations", type=int, default=2, help="max_iterations of each of them")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="iterations per worker at once")
    parser.add_argument(
        "--pool",
        choices=("prefork", "threads"),
        default="prefork",
        help="the workers' pool (and the raw ones')",
    )
    parser.add_argument("--long-projects", type=int, default=2, help="projects run long, for history")
    parser.add_argument("--long-iterations", type=int, default=34, help="the last iteration measured")
    parser.add_argument("--window", type=int, default=5, help="iterations per project per window")
    parser.add_argument("--noops", type=int, default=1000, help="raw no-op tasks")
    parser.add_argument(
        "--warm-pool", type=int, default=0, help="RAAS_WARM_POOL_SIZE of the workers (0, the default: none)"
    )
    parser.add_argument(
        "--follow-fraction",
        type=float,
        default=0.1,
        help="share of the load projects that deliver to a loopback remote and follow their PR (0: none)",
    )
    parser.add_argument(
        "--poll-s", type=float, default=60.0, help="[delivery] poll_s of those projects (default: 60 s)"
    )
    args = parser.parse_args()
    if not 0 <= args.follow_fraction <= 1:
        parser.error(f"--follow-fraction must be between 0 and 1 (got {args.follow_fraction:g})")
    if args.poll_s < 1:
        parser.error(f"--poll-s must be at least 1 ([delivery] poll_s's minimum; got {args.poll_s:g})")
    with rig.workdir() as workdir, rig.services() as svc:
        measured = measure(svc, workdir, args)
    table = table_of(measured)
    print_report(measured, table)
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
