"""Postgres work per iteration early and late in projects' lives, from Postgres's own counters.

pg_stat_database counts every transaction and row of the benchmark database, whoever makes
it; a backend publishes its counts when it goes idle, at most once a second, and otherwise
within 10 s. So the counters are read only at quiet points: every measured project paused,
its last iteration ended, and the statistics flushed. A window is the work between two quiet
points, divided by the iterations that ended in it. Each window holds the same kind of
overhead (one resume or start and one pause per project), so late/early compares like with like.
The coordinator's reconcile loop works by the clock, not by the iteration: bench_load slows it
down for the run and measures one pass of it on its own (``reconcile_pass``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from orchestrator.scheduling.reconcile import Reconciler
from shared.db import get_engine
from shared.events import NullBus
from shared.settings import get_settings
from tests.benchmarks import rig
from tests.benchmarks.follower import Follower
from tests.support.stack import Stack

# Backends publish their statistics within 10 s of going idle (PGSTAT_IDLE_INTERVAL).
STATS_FLUSH_S = 11.5


@dataclass
class QuietPoint:
    at: float
    counters: dict[str, int]
    tables: dict[str, int]


def read_point(svc: rig.Services) -> QuietPoint:
    """The counters now; reading the per-table ones costs a little, which falls after the point."""
    return QuietPoint(time.time(), svc.counters(), svc.table_counters())


def reading_cost(svc: rig.Services) -> dict[str, int]:
    """What one ``table_counters`` read adds to pg_stat_database (a transaction, catalog rows)."""
    before = svc.counters()
    svc.table_counters()
    time.sleep(1.0)  # its backend has exited, and published its statistics
    after = svc.counters()
    return {c: after[c] - before[c] for c in after}


@dataclass
class Window:
    """The work between two quiet points, less the one ``table_counters`` read in it."""

    name: str
    first: QuietPoint
    last: QuietPoint
    reading: dict[str, int]
    iterations: int = 0

    @property
    def duration_s(self) -> float:
        return self.last.at - self.first.at

    def per_iteration(self, *counters: str) -> float:
        """The sum of pg_stat_database ``counters`` over the window, per iteration."""
        total = sum(self.last.counters[c] - self.first.counters[c] - self.reading[c] for c in counters)
        return total / max(1, self.iterations)

    def table_per_iteration(self, counter: str) -> float:
        """A pg_stat_user_tables counter (``table.column``) over the window, per iteration."""
        total = self.last.tables.get(counter, 0) - self.first.tables.get(counter, 0)
        return total / max(1, self.iterations)


def quiet_point(
    svc: rig.Services, follower: Follower, project_ids: list[str], timeout_s: float
) -> QuietPoint:
    """Once the projects have settled (and stayed so for a second) and the statistics are flushed."""
    deadline = time.monotonic() + timeout_s
    quiet_since: float | None = None
    while quiet_since is None or time.monotonic() - quiet_since < 1.0:
        quiet_since = (quiet_since or time.monotonic()) if follower.settled(project_ids) else None
        if time.monotonic() > deadline:
            msg = f"the long projects did not settle within {timeout_s:.0f}s"
            raise TimeoutError(msg)
        time.sleep(0.05)
    time.sleep(STATS_FLUSH_S)
    return read_point(svc)


def run_until(running: Stack, follower: Follower, project_ids: list[str], verb: str, number: int) -> None:
    """``verb`` (start or resume) every project, and pause each once its iteration ``number`` started."""
    follower.paused.difference_update(project_ids)
    rig.call_all(running, verb, project_ids)
    client = rig.api(running)
    pending = set(project_ids)
    deadline = time.monotonic() + 60 + number * 10
    while pending:
        for project_id in [p for p in pending if follower.started.get(p, 0) >= number]:
            client.request("POST", f"/v1/projects/{project_id}/pause")
            pending.discard(project_id)
        if time.monotonic() > deadline:
            msg = f"{len(pending)} long projects did not reach iteration {number}"
            raise TimeoutError(msg)
        time.sleep(0.02)


@dataclass
class ReconcileCost:
    finished_iterations: int  # in the whole database
    rows_read: int
    by_table: dict[str, int]


def reconcile_pass(svc: rig.Services) -> tuple[ReconcileCost, QuietPoint]:
    """One pass of the coordinator's reconcile loop, run in this process on the quiet benchmark
    database: the rows it read, and a quiet point after it (the next window starts there).

    A backend publishes its statistics when it exits, so every connection used here is closed
    before the counters are read.
    """
    settings = get_settings()
    if settings.database_url != svc.database_url or get_engine(None).url.database != svc.dbname:
        msg = f"this process's settings point at {settings.database_url}, not the benchmark database"
        raise RuntimeError(msg)
    with svc.pg() as conn:
        row = conn.execute(
            "SELECT count(*) FROM iterations WHERE status IN ('succeeded', 'failed')"
        ).fetchone()
    time.sleep(1.0)
    before = svc.table_counters()
    time.sleep(1.0)
    Reconciler(settings, _Recorder([]), NullBus()).run_once()
    get_engine(None).dispose()  # the key session_scope() uses: get_engine() is another engine
    time.sleep(1.0)
    point = read_point(svc)
    read = {
        c: n - before.get(c, 0)
        for c, n in point.tables.items()
        if c.endswith(("seq_tup_read", "idx_tup_fetch"))
    }
    cost = ReconcileCost(int(row[0]) if row else 0, sum(read.values()), {c: n for c, n in read.items() if n})
    return cost, point


@dataclass
class _Recorder:
    """A dispatcher that only remembers: at a quiet point the pass should enqueue nothing."""

    enqueued: list[tuple[str, str]]

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        self.enqueued.append((project_id, iteration_id))

    def enqueue_delivery(self, delivery_id: str) -> None:
        self.enqueued.append(("delivery", delivery_id))


@dataclass
class History:
    early: Window
    late: Window
    reconcile: list[ReconcileCost]  # a pass before the early window and one after the late


def early_and_late(
    svc: rig.Services, running: Stack, follower: Follower, project_ids: list[str], last: int, window: int
) -> History:
    """Run the (created, not started) projects to iteration ``last``, measuring iterations
    1..``window`` and the ``window`` iterations that end at ``last``; then stop them."""
    settle_s = 60 + window * 10
    quiet_point(svc, follower, [], settle_s)
    reading = reading_cost(svc)
    first_pass, start = reconcile_pass(svc)
    run_until(running, follower, project_ids, "start", window)
    early = Window(
        f"iterations 1-{window}", start, quiet_point(svc, follower, project_ids, settle_s), reading
    )
    run_until(running, follower, project_ids, "resume", last - window)
    before_late = quiet_point(svc, follower, project_ids, 60 + last * 10)
    run_until(running, follower, project_ids, "resume", last)
    late = Window(
        f"iterations {last - window + 1}-{last}",
        before_late,
        quiet_point(svc, follower, project_ids, settle_s),
        reading,
    )
    last_pass, _ = reconcile_pass(svc)
    rig.call_all(running, "stop", project_ids)
    with svc.pg() as conn:
        for w in (early, late):
            row = conn.execute(
                "SELECT count(*) FROM events WHERE project_id = ANY(%s) AND ts > to_timestamp(%s) "
                "AND ts <= to_timestamp(%s) AND type IN ('iteration_complete', 'iteration_error')",
                (project_ids, w.first.at, w.last.at),
            ).fetchone()
            w.iterations = int(row[0]) if row else 0
    return History(early, late, [first_pass, last_pass])


def by_table(window: Window, at_least: float = 10.0) -> list[str]:
    """Where the window's rows read per iteration come from, table by table."""
    lines = []
    for table in sorted({c.partition(".")[0] for c in window.last.tables}):
        rows = {k: window.table_per_iteration(f"{table}.{k}") for k in ("seq_tup_read", "idx_tup_fetch")}
        scans = {k: window.table_per_iteration(f"{table}.{k}") for k in ("seq_scan", "idx_scan")}
        if sum(rows.values()) >= at_least:
            lines.append(
                f"  {table}: {rows['seq_tup_read']:.0f} rows by {scans['seq_scan']:.1f} seq scans, "
                f"{rows['idx_tup_fetch']:.0f} rows by {scans['idx_scan']:.1f} index scans"
            )
    return lines


def growth(early: Window, late: Window) -> list[str]:
    """Rows read per iteration, by table (heap rows) or index (entries), that grew by more than
    a quarter between the windows."""
    lines = []
    for counter in sorted(late.last.tables):
        name, _, kind = counter.partition(".")
        if kind not in ("seq_tup_read", "idx_tup_fetch", "idx_tup_read"):
            continue
        before, after = early.table_per_iteration(counter), late.table_per_iteration(counter)
        if after - before > 5 and after > 1.25 * before:
            scans = f"{name}.{'seq_scan' if kind == 'seq_tup_read' else 'idx_scan'}"
            lines.append(
                f"  {counter}: {before:.1f} -> {after:.1f} per iteration, in "
                f"{early.table_per_iteration(scans):.1f} -> {late.table_per_iteration(scans):.1f} scans"
            )
    return lines
