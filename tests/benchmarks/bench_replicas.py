"""Coordinator replicas (issue #29): throughput with two against one, and the reconcile lease's
failover against its configured expiry, each measured in this run.

Throughput: P projects of M iterations each start at once and run to ``max_iterations``; the
figure is iterations advanced per second, start to the last project's end, with two coordinator
replicas against one on the same machine, database and broker. The load is coordinator-bound:
the workers are null workers (tests.benchmarks.null_worker: claim, record, report; no sandbox,
no model, no workspace), so what is measured is the coordinators' side of every hand-off (the
report on the coordinator queue, ``advance``, admission, the next enqueue), which both replicas
consume. Each replica runs under a CPU quota of ``--replica-cpu`` cores (default 0.25, the
coordinator pod's CPU request in deploy/kubernetes/coordinator.yaml; tests.benchmarks.cpu_quota),
as it would on a host or pod of its own: on one 2-core machine the replicas otherwise share the
cores with Postgres, Redis and the workers, which saturate them first, and the figure would say
nothing of the coordinator. Goal: >= 1.6x.

Failover: two replicas, the lease RAAS_LEASE_S; an iteration is claimed by a "worker" that then
never beats (a dead one), and the lease's holder is SIGKILLed at once; the figure is the time from
the kill to the other replica sending the iteration again (its ``enqueued_at``), against
RAAS_LEASE_S. Repeated ``--kills`` times (a fresh replica replaces the killed one each time).
Goal: <= 1.5x (the documented bound is 1.25x plus a pass).

Run: ``.venv/bin/python -m tests.benchmarks.bench_replicas [--projects P] [--iterations M]
[--kills K] [--lease-s S] [--replica-cpu CORES]``. Needs Postgres and Redis (no Docker: nothing
runs in a sandbox) and, for the quota, root; it makes its own database (dropped at the end), Redis
server (stopped at the end) and cgroups (removed at the end).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select

from shared.celery_app import ITERATIONS_QUEUE
from shared.db import session_scope
from shared.models import Iteration, IterationStatus, Project, ProjectStatus
from tests.benchmarks import cpu, cpu_quota, rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.replicas import holder_process, lease_holder, replica_url, start_replica
from tests.support.stack import Stack
from workers.claim import claim_iteration

GOAL_THROUGHPUT = 1.6
GOAL_FAILOVER = 1.5
# A paused project (its budget, the breaker) is settled too: the check below reports it.
ENDED = (ProjectStatus.COMPLETED, ProjectStatus.FAILED, ProjectStatus.STOPPED, ProjectStatus.PAUSED)
# No task containers to route to: every iteration goes to the shared queue.
ENV = {"RAAS_TASK_CONTAINER_IDLE_S": "0", "RAAS_RECONCILE_INTERVAL_S": "1"}


def spawn_null_workers(running: Stack, count: int, concurrency: int) -> None:
    for index in range(count):
        name = f"null{index}"
        with (running.log_dir / f"{name}.log").open("ab") as log:
            running.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "celery", "--app", "tests.benchmarks.null_worker", "worker",
                 "--queues", ITERATIONS_QUEUE, "--pool", "threads", "--concurrency", str(concurrency),
                 "--hostname", f"{name}@%h", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
                env=running.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip


def wait_ended(project_ids: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            left = session.scalar(
                select(func.count())
                .select_from(Project)
                .where(Project.id.in_(project_ids), Project.status.not_in(ENDED))
            )
        if not left:
            return
        if time.monotonic() > deadline:
            msg = f"{left} project(s) still running after {timeout_s:.0f} s"
            raise TimeoutError(msg)
        time.sleep(0.1)


def advanced(project_ids: list[str]) -> int:
    with session_scope() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(Iteration)
                .where(Iteration.project_id.in_(project_ids), Iteration.advanced.is_(True))
            )
            or 0
        )


@dataclass
class Run:
    per_s: float
    advanced: int
    ended: list[str]
    cores: dict[str, float]
    """Cores each component kept busy on average (CPU seconds over the run's seconds)."""
    throttled: float
    """Share of the run the replicas spent waiting for their quota (summed over replicas)."""


def _components(running: Stack) -> cpu.Components:
    parts = cpu.Components()
    parts.groups("coordinators", [p.pid for n, p in running.procs.items() if n.startswith("coordinator")])
    parts.groups("null workers", [p.pid for n, p in running.procs.items() if n.startswith("null")])
    parts.named("postgres", ["postgres"])
    parts.named("redis", ["redis-server"])
    return parts


def throughput(svc: rig.Services, replicas: int, args: argparse.Namespace) -> Run:
    """Iterations advanced per second with ``replicas`` coordinators, and where the CPU went."""
    with rig.workdir() as work, rig.stack(svc, work, rig.NEVER_DONE_SCRIPT, 0, 1, env=ENV) as running:
        for index in range(1, replicas):
            start_replica(running, f"coordinator-{index}")
        spawn_null_workers(running, args.null_workers, args.null_concurrency)
        ids = rig.create_projects(running, args.projects, rig.raas_toml(args.iterations), f"r{replicas}")
        with cpu_quota.quotas(args.replica_cpu) as quotas:
            if quotas is not None:  # after their start-up, which the measure does not include
                for name, proc in running.procs.items():
                    if name.startswith("coordinator"):
                        quotas.limit(proc.pid)
            parts = _components(running)
            before = parts.sample()
            started = time.monotonic()
            rig.call_all(running, "start", ids)
            wait_ended(ids, timeout_s=900)
            elapsed = time.monotonic() - started
            used = cpu.spent(before, parts.sample())
            throttled = quotas.throttled_s() / elapsed if quotas is not None else 0.0
        with session_scope() as session:
            rows = session.execute(select(Project.status, Project.status_reason).where(Project.id.in_(ids)))
            reasons = sorted({f"{status.value}: {reason}" for status, reason in rows})
        count = advanced(ids)
        cores = {name: spent / elapsed for name, spent in used.items()}
        return Run(count / elapsed, count, reasons, cores, throttled)


def _dead_worker_iteration(running: Stack) -> tuple[str, datetime]:
    """A project started, its first iteration claimed by a worker that never beats again."""
    [project_id] = rig.create_projects(running, 1, rig.raas_toml(3), "failover")
    rig.call_all(running, "start", [project_id])
    deadline = time.monotonic() + 30
    while True:
        with session_scope() as session:
            iteration_id = session.scalar(
                select(Iteration.id).where(
                    Iteration.project_id == project_id, Iteration.status == IterationStatus.QUEUED
                )
            )
        if iteration_id is not None:
            break
        if time.monotonic() > deadline:
            msg = f"project {project_id} has no queued iteration"
            raise TimeoutError(msg)
        time.sleep(0.05)
    claim = claim_iteration(iteration_id, "dead@bench", stale_after_s=3600)
    assert claim is not None
    return iteration_id, datetime.now(UTC)


def failovers(svc: rig.Services, args: argparse.Namespace) -> list[float]:
    """Seconds from the lease holder's SIGKILL to the dead worker's iteration sent again."""
    env = {**ENV, "RAAS_LEASE_S": str(args.lease_s), "RAAS_HEARTBEAT_STALE_S": "0.5"}
    times: list[float] = []
    with rig.workdir() as work, rig.stack(svc, work, rig.NEVER_DONE_SCRIPT, 0, 1, env=env) as running:
        ports = {
            "coordinator": running.coordinator_port,
            "coordinator-1": start_replica(running, "coordinator-1"),
        }
        for kill in range(args.kills):
            holder = rig_holder(running, svc)
            # Projects are submitted to a replica that stays (rig.api reads this URL).
            survivor = next(name for name in ports if name != holder)
            running.env["RAAS_COORDINATOR_URL"] = replica_url(ports[survivor])
            iteration_id, claimed = _dead_worker_iteration(running)
            killed_at = time.monotonic()
            os.killpg(running.procs[holder].pid, signal.SIGKILL)
            running.procs[holder].wait()
            deadline = killed_at + 10 * args.lease_s
            while True:
                with session_scope() as session:
                    sent = session.get_one(Iteration, iteration_id).enqueued_at
                if sent is not None and sent > claimed:
                    times.append(time.monotonic() - killed_at)
                    break
                if time.monotonic() > deadline:
                    msg = f"kill {kill}: iteration {iteration_id} not sent again:\n{running.logs()}"
                    raise TimeoutError(msg)
                time.sleep(0.02)
            del ports[holder]
            ports[f"coordinator-{kill + 2}"] = start_replica(running, f"coordinator-{kill + 2}")
    return times


def rig_holder(running: Stack, svc: rig.Services) -> str:
    deadline = time.monotonic() + 60
    while (held := lease_holder(svc.database_url)) is None:
        if time.monotonic() > deadline:
            msg = "no replica took the lease"
            raise TimeoutError(msg)
        time.sleep(0.1)
    return holder_process(running, held[0])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--projects", type=int, default=24, help="projects started at once")
    parser.add_argument("--iterations", type=int, default=25, help="max_iterations of each project")
    parser.add_argument("--null-workers", type=int, default=2, help="null worker processes")
    parser.add_argument("--null-concurrency", type=int, default=8, help="threads of each null worker")
    parser.add_argument("--kills", type=int, default=5, help="lease holders SIGKILLed, one after another")
    parser.add_argument("--lease-s", type=float, default=4.0, help="RAAS_LEASE_S of the failover runs")
    parser.add_argument(
        "--replica-cpu", type=float, default=0.25,
        help="CPU quota of each replica in the throughput runs, in cores (0: none)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.replica_cpu < 0:
        parser.error("--replica-cpu must be 0 (no quota) or a positive number of cores")
    table = Table()
    try:
        with cpu_quota.quotas(args.replica_cpu):  # fails here, before anything starts, if it cannot
            pass
    except cpu_quota.QuotaUnavailable as exc:
        print(f"bench_replicas: {exc}", file=sys.stderr)
        return 2
    with rig.services() as svc:
        one = throughput(svc, 1, args)
        two = throughput(svc, 2, args)
        kills = failovers(svc, args)
    table.figures.append(
        Figure("iterations advanced / s", two.per_s, one.per_s, "/s", "one replica", goal_min=GOAL_THROUGHPUT)
    )
    for name, seconds in (("failover, median", rig.median(kills)), ("failover, worst", max(kills))):
        table.figures.append(Figure(name, seconds, args.lease_s, "s", "RAAS_LEASE_S", goal_max=GOAL_FAILOVER))
    expected = args.projects * args.iterations
    for label, run in (("one replica", one), ("two replicas", two)):
        detail = f"{run.advanced} of {expected}"
        table.checks.append(Check(f"every iteration advanced ({label})", run.advanced == expected, detail))
    at_max = all("max_iterations" in reason for reason in one.ended + two.ended)
    table.checks.append(Check("every project ended at max_iterations", at_max, f"{one.ended} / {two.ended}"))
    print(
        f"coordinator replicas benchmark: {args.projects} projects x {args.iterations} iterations on "
        f"{args.null_workers} null workers x {args.null_concurrency} threads; {args.kills} lease-holder "
        f"kills, RAAS_LEASE_S={args.lease_s:g}; each replica's CPU quota "
        + (f"{args.replica_cpu:g} cores" if args.replica_cpu else "none")
    )
    print(f"machine: {rig.machine()}")
    table.print()
    print("\nfailover times (s): " + ", ".join(f"{t:.2f}" for t in kills))
    print(f"cores kept busy during the throughput runs, of {os.cpu_count()} (one replica / two replicas):")
    for name in one.cores:
        print(f"  {name:<28} {one.cores[name]:5.2f} / {two.cores.get(name, 0.0):5.2f}")
    per_iteration = [run.cores.get("coordinators", 0.0) / run.per_s * 1000 for run in (one, two)]
    print(f"coordinators' CPU per advanced iteration (ms): {per_iteration[0]:.1f} / {per_iteration[1]:.1f}")
    if args.replica_cpu:
        waited = f"{one.throttled:.2f} / {two.throttled:.2f}"
        print(f"replicas' time waiting for their quota, per second of the run: {waited}")
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
