"""Hand-off between iterations as a ratio against a raw Celery round trip, both measured in this run.

Ours: iteration N reported (its ``iteration_complete`` event) → iteration N+1 started (its
``iteration_started`` event), both written by the worker; the gap is the worker's report to the
coordinator through the broker, the coordinator's ``advance`` and its enqueue, and the worker
taking and claiming the next iteration. The scripted model answers at once and never completes,
so every project runs to ``max_iterations``; projects run one after another on one worker
(concurrency 1, ``--pool`` threads or prefork), so no hand-off waits behind another project.

Baseline: the same trip with nothing in it — a no-op task in a worker of the same pool sends a task to a
threads worker (the coordinator's pool), which sends one back, on a throwaway Celery app with the
product's configuration on the same Redis; from the first task's send to the second one's start,
stamped with the same clock. Measured before and after ours; the median of both. Two cadences:
spaced like iterations (``--gap``), the like-for-like baseline, and back to back, which keeps
processes and caches hot as no hand-off of ours is; the goal's verdict is printed against both.

Run: ``.venv/bin/python -m tests.benchmarks.bench_coordinator [--projects N] [--iterations N]``.
Needs Postgres, Redis, Docker and the sandbox image; it makes its own database (dropped at the
end) and a Redis server of its own (stopped at the end).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks import raw, rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.stack import Stack

GOAL_RATIO = 3.0
TERMINAL = {"completed", "failed", "stopped"}


def run_projects(running: Stack, projects: int, iterations: int) -> list[str]:
    """Run ``projects`` never-finishing projects, one after another, each to ``iterations``."""
    client = rig.api(running)
    archive = rig.project_archive(rig.raas_toml(iterations))
    ids = []
    for index in range(projects):
        project_id = client.create_project(archive, f"handoff-{index}")["id"]
        client.start_project(project_id)
        deadline = time.monotonic() + 30 + iterations * 15
        while client.request("GET", f"/v1/projects/{project_id}")["status"] not in TERMINAL:
            if time.monotonic() > deadline:
                msg = f"project {project_id} did not end in time:\n{running.logs()}"
                raise TimeoutError(msg)
            time.sleep(0.5)
        ids.append(project_id)
    return ids


def hand_off_parts(svc: rig.Services, project_ids: list[str]) -> dict[str, float]:
    """Medians of where a hand-off's time goes, from the iteration rows' own timestamps."""
    with svc.pg() as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM i.enqueued_at - c.ts), "
            "extract(epoch FROM i.started_at - i.enqueued_at), "
            "extract(epoch FROM s.ts - i.started_at) FROM iterations i "
            "JOIN events c ON c.project_id = i.project_id AND c.type = 'iteration_complete' "
            "AND (c.data->>'number')::int = i.number - 1 "
            "JOIN events s ON s.project_id = i.project_id AND s.type = 'iteration_started' "
            "AND (s.data->>'number')::int = i.number "
            "WHERE i.project_id = ANY(%s)",
            (project_ids,),
        ).fetchall()
    parts = (
        "reported -> next enqueued (event commit, report hop, advance)",
        "enqueued -> claimed (advance commit, enqueue hop, worker takes it)",
        "claimed -> iteration_started written",
    )
    return {name: rig.median([float(row[i]) for row in rows]) for i, name in enumerate(parts)} if rows else {}


def advance_task_s(log: Path) -> list[float]:
    """How long each ``advance_project`` task ran in the coordinator, from Celery's log lines."""
    found = re.findall(
        r"raas\.advance_project\[[^\]]+\] succeeded in ([0-9.]+)s", log.read_text(errors="replace")
    )
    return [float(s) for s in found]


def measured_hand_offs(svc: rig.Services, project_ids: list[str]) -> tuple[list[float], list[float]]:
    """Seconds from each ``iteration_complete`` to the next ``iteration_started``, and each
    iteration's own duration, from the events' timestamps in Postgres."""
    with svc.pg() as conn:
        rows = conn.execute(
            "SELECT project_id, type, (data->>'number')::int, ts FROM events "
            "WHERE project_id = ANY(%s) AND type IN ('iteration_started', 'iteration_complete')",
            (project_ids,),
        ).fetchall()
    stamps: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for project_id, type_, number, ts in rows:
        stamps[project_id, type_][number] = ts.timestamp()
    hand_offs, durations = [], []
    for project_id in project_ids:
        started, complete = stamps[project_id, "iteration_started"], stamps[project_id, "iteration_complete"]
        hand_offs += [started[n + 1] - complete[n] for n in complete if n + 1 in started]
        durations += [complete[n] - started[n] for n in complete if n in started]
    return hand_offs, durations


@dataclass
class Measured:
    hand_offs: list[float]  # seconds
    baseline: list[float]  # seconds, raw round trips spaced like iterations
    back_to_back: list[float]  # seconds, raw round trips one right after another
    durations: list[float]  # seconds, of the iterations themselves
    parts: dict[str, float]
    advance_s: list[float]
    ended: dict[str, int]  # status reason → projects


def measure(args: argparse.Namespace) -> Measured:
    with rig.workdir() as workdir, rig.services() as svc:
        stack = rig.stack(svc, workdir, rig.NEVER_DONE_SCRIPT, workers=1, concurrency=1, pool=args.pool)
        with stack as running:
            rig.wait_workers_ready(running, 1)
            raw.use_broker(svc.redis_url)
            specs = [
                ("worker", raw.WORKER_QUEUE, args.pool, 1),
                ("coordinator", raw.COORDINATOR_QUEUE, "threads", 4),
            ]
            with raw.workers(specs, running.env, running.log_dir):
                raw.run_hops(5)  # warm-up: a prefork child imports and connects on its first task
                back_to_back = raw.run_hops(args.hops)
                baseline = raw.run_hops(args.spaced_hops, args.gap)
                project_ids = run_projects(running, args.projects, args.iterations)
                back_to_back += raw.run_hops(args.hops)
                baseline += raw.run_hops(args.spaced_hops, args.gap)
            advance_s = advance_task_s(running.log_dir / "coordinator.log")
        hand_offs, durations = measured_hand_offs(svc, project_ids)
        with svc.pg() as conn:
            ended = conn.execute(
                "SELECT status || ': ' || coalesce(pause_reason || ': ', '') || coalesce(status_reason, ''), "
                "count(*) FROM projects "
                "WHERE id = ANY(%s) GROUP BY 1",
                (project_ids,),
            ).fetchall()
        return Measured(
            hand_offs,
            baseline,
            back_to_back,
            durations,
            hand_off_parts(svc, project_ids),
            advance_s,
            dict(ended),
        )


def table_of(args: argparse.Namespace, m: Measured) -> Table:
    table = Table()
    table.figures.append(
        Figure(
            "hand-off: iteration N reported -> N+1 started",
            rig.median(m.hand_offs) * 1000,
            rig.median(m.baseline) * 1000,
            "ms",
            "raw Celery worker->coordinator->worker",
            goal_max=GOAL_RATIO,
        )
    )
    table.figures.append(
        Figure(
            "hand-off, against raw round trips back to back",
            rig.median(m.hand_offs) * 1000,
            rig.median(m.back_to_back) * 1000,
            "ms",
            "raw Celery, no gap between round trips",
            goal_max=GOAL_RATIO,
        )
    )
    table.figures.append(
        Figure(
            "hand-off, 90th percentile",
            rig.percentile(m.hand_offs, 90) * 1000,
            rig.percentile(m.baseline, 90) * 1000,
            "ms",
            "raw Celery, 90th percentile",
        )
    )
    expected = args.projects * (args.iterations - 1)
    measured = len(m.hand_offs)
    table.checks.append(Check("every hand-off measured", measured == expected, f"{measured} of {expected}"))
    on_max = all(reason.startswith("failed") and "max_iterations" in reason for reason in m.ended)
    table.checks.append(Check("every project ran to max_iterations", on_max, str(m.ended)))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--projects", type=int, default=3, help="projects, run one after another")
    parser.add_argument("--iterations", type=int, default=20, help="max_iterations of each project")
    parser.add_argument(
        "--hops", type=int, default=60, help="raw round trips back to back, before and after ours each"
    )
    parser.add_argument(
        "--spaced-hops", type=int, default=30, help="raw round trips spaced by --gap, before and after ours"
    )
    parser.add_argument(
        "--gap", type=float, default=0.5, help="seconds between spaced raw round trips (about an iteration)"
    )
    parser.add_argument(
        "--pool",
        choices=("threads", "prefork"),
        default="threads",
        help="the worker's pool (and the raw one's)",
    )
    args = parser.parse_args()
    m = measure(args)
    table = table_of(args, m)
    print(
        f"iteration hand-off benchmark: {args.projects} projects x {args.iterations} iterations, one after "
        f"another on 1 worker (concurrency 1, {args.pool}); median of {len(m.hand_offs)} hand-offs vs "
        f"{len(m.baseline)} raw round trips"
    )
    print(f"machine: {rig.machine()}")
    table.print()
    spaced, hot = table.figures[0], table.figures[1]
    print(
        f"\nverdict, goal <= {GOAL_RATIO:g}x: {spaced.ratio:.2f}x against round trips spaced like iterations "
        f"({spaced.met()}), {hot.ratio:.2f}x against round trips back to back ({hot.met()})"
    )
    print(
        f"\nfor scale, an iteration itself (iteration_started -> iteration_complete: sandbox, one model "
        f"call, workspace round trip) takes a median {rig.median(m.durations) * 1000:.0f} ms"
    )
    print("where a hand-off goes (medians, from the iteration rows' timestamps):")
    parts = dict(m.parts)
    if m.advance_s:
        parts["the coordinator's advance_project task alone (Celery's log)"] = rig.median(m.advance_s)
    for name, seconds in parts.items():
        print(f"  {name:<68} {seconds * 1000:7.1f} ms")
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
