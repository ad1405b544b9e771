"""Density: how many iterations one worker process holds, against prefork, on the same machine.

Every iteration of ``--projects`` projects makes two model calls, each answered by the scripted
model after ``--delay`` seconds, and one tool call (bash) in its container: nearly all of its time
is waiting, as a real iteration's is. Two set-ups, each on a stack of its own:

(a) prefork: ``--prefork-workers`` workers x ``--prefork-concurrency`` (2 x 2, bench_load's), on
    ``--prefork-projects`` projects: enough to keep its slots busy; more would only take longer.
(b) threads: one worker, ``--pool threads --concurrency C`` (``--concurrency``), on ``--projects``.

For each: the **iteration time at low load** (two projects alone, median ``started_at`` ->
``finished_at``); the **raw container rate**: ``docker run --rm --network none IMAGE true`` with
the set-up's parallelism (its total concurrency), containers started and removed per second (and
the CPU each took: the Docker engine's, and the whole machine's with the docker CLI);
then the **load**: every project started at once, ``--iterations`` iterations each, iterations
per second from the first start to the last end. The ideal is the lower of concurrency /
iteration time and the raw container rate (without reuse, an iteration starts and removes one
container).

**Task containers are reused** (issue #26 point 4, the default: ``RAAS_TASK_CONTAINER_IDLE_S``):
a project's next iteration runs in the container its previous one left, so most iterations start
none; ``--no-reuse`` runs both set-ups with a container per iteration, as before. Beside the
throughput, the **machine's CPU per iteration** against a raw ``docker run --rm``'s (goal <= 1.0x
with reuse) and the sandbox containers seen under load per iteration (sampled each second).
Beside it, what a system costing nothing but the raw container would do in the same shape
(:func:`container_bound`): with every project started at once its first wave waits for
containers and its last one drains, ~0.7 of the ideal at 2 iterations a project, ~0.84 at the
default 5 (steadier figures, and a longer run).
**Memory**: the worker processes' PSS (summed over each worker's process group, prefork
children included: a page shared by n processes counts 1/n in each) at the peak of the load,
per iteration running at that moment (peak). Then where an iteration's time goes, at low load
and under load, from its rows and events; and the checks bench_load makes (nothing lost or run
twice, sequences gapless, budgets kept, reservations released, no container left).

The database is a PostgreSQL cluster of the run's own (``max_connections`` 400, fsync off): a
threads worker of concurrency C may hold up to C connections, which a shared server (100) cannot
spare.

Run: ``.venv/bin/python -m tests.benchmarks.bench_density [--projects N] [--delay S]
[--concurrency C] [--iterations N]``. Needs Docker, the sandbox image and redis-server (it starts
one of its own).
"""

from __future__ import annotations

import argparse
import heapq
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from shared.db import forget_engines
from shared.migrate import upgrade
from shared.settings import get_settings
from tests.benchmarks import cpu, rig
from tests.benchmarks.bench_load import integrity_checks, load_span
from tests.benchmarks.phases import phases_of, print_phases
from tests.benchmarks.table import Check, Figure, Table
from tests.support.faults import PrivatePostgres
from tests.support.stack import Stack

IMAGE = os.environ.get("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
TERMINAL = ["completed", "failed", "stopped"]


def script(delay_s: float) -> dict[str, Any]:
    """Per iteration: a call answered after ``delay_s`` asking for bash, then one that ends the turn."""
    work = {
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "name": "bash", "input": {"command": "echo hi"}},
        ],
        "latency_s": delay_s,
    }
    done = {"content": [{"type": "text", "text": "Checked; more next time."}], "latency_s": delay_s}
    return {"responses": [work, done], "when_exhausted": "cycle"}


def raas_toml(iterations: int) -> str:
    return (
        f"max_iterations = {iterations}\nmax_turns = 3\nmax_tokens = 1024\n[budget]\nlimit_usd = 5\n"
        f"[circuit_breaker]\nmax_no_progress = {iterations + 1}\n"
    )


@dataclass
class Setup:
    name: str
    pool: str
    workers: int
    concurrency: int  # per worker
    projects: int

    @property
    def slots(self) -> int:
        return self.workers * self.concurrency


@dataclass
class Run:
    """What one set-up measured."""

    setup: Setup
    low_iteration_s: float = 0.0
    raw_containers_per_s: float = 0.0
    raw_cpu_s: dict[str, float] = field(default_factory=dict)  # per raw container, engine and machine
    load: tuple[float, float, int] = (0.0, 0.0, 0)
    containers_seen: set[str] = field(default_factory=set)  # under load
    peak_memory_kib: int = 0
    idle_memory_kib: int = 0
    peak_running: int = 0
    peak_connections: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)  # by component, over the load
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        first, last, iterations = self.load
        return iterations / (last - first)

    @property
    def ideal(self) -> float:
        return min(self.setup.slots / self.low_iteration_s, self.raw_containers_per_s)

    @property
    def machine_cpu_per_iteration(self) -> float:
        return self.cpu_s.get("machine (every process)", 0.0) / max(1, self.load[2])

    @property
    def memory_per_iteration_mib(self) -> float:
        return self.peak_memory_kib / 1024 / max(1, self.peak_running)


@contextmanager
def private_services() -> Iterator[tuple[rig.Services, int]]:
    """A PostgreSQL cluster of this run's own (migrated) and the run's Redis; and the cluster's
    postmaster process."""
    root = Path(tempfile.mkdtemp(prefix="raas-bench-pg-"))
    shutil.chown(root, "postgres", "postgres")
    server = PrivatePostgres(root)
    server.init()
    with (root / "data" / "postgresql.conf").open("a") as conf:
        conf.write("max_connections = 400\n")
    server.start()
    url = server.url
    try:
        with rig.redis_for_run() as redis_url:
            os.environ.update(
                {"RAAS_DATABASE_URL": url, "RAAS_REDIS_URL": redis_url, "RAAS_BROKER_URL": redis_url}
            )
            get_settings.cache_clear()
            forget_engines()
            upgrade(url)
            postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
            yield rig.Services("postgres", url, redis_url), postmaster
    finally:
        forget_engines()
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def raw_container_rate(parallel: int, count: int) -> float:
    """Containers started and removed per second by ``parallel`` ``docker run --rm`` at a time."""
    label = f"raas.bench.raw={secrets.token_hex(4)}"
    command = ["docker", "run", "--rm", "--network", "none", "--label", label, IMAGE, "true"]
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(parallel) as pool:
            codes = list(
                pool.map(lambda _: subprocess.run(command, capture_output=True).returncode, range(count))
            )
    finally:
        left = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True
        )
        if left.stdout.split():
            subprocess.run(["docker", "rm", "-f", *left.stdout.split()], capture_output=True)
    elapsed = time.monotonic() - started
    if any(codes):
        msg = f"{sum(1 for c in codes if c)} of {count} raw docker runs failed"
        raise RuntimeError(msg)
    return count / elapsed


def container_bound(setup: Setup, containers_per_s: float, iteration_s: float, iterations: int) -> float:
    """Iterations per second of a system whose only cost is the raw container, in this load's shape.

    Its iterations take one container each, started one after another at the raw rate, then
    ``iteration_s`` of waiting; every project starts at once and runs ``iterations`` in a row on
    ``setup.slots`` slots. The first wave waits for its containers and the last one drains, so
    even this system stays under the ideal: with 2 iterations a project, ~0.7 of it.
    """
    ready = [(0.0, project, 0) for project in range(setup.projects)]
    heapq.heapify(ready)
    running: list[float] = []  # when each busy slot frees
    engine_free = last = 0.0
    while ready:
        at, project, done = heapq.heappop(ready)
        while len(running) >= setup.slots:
            at = max(at, heapq.heappop(running))
        engine_free = max(at, engine_free) + 1 / containers_per_s
        ends = engine_free + iteration_s
        heapq.heappush(running, ends)
        if done + 1 < iterations:
            heapq.heappush(ready, (ends, project, done + 1))
        last = max(last, ends)
    return setup.projects * iterations / last


def sandbox_ids(client: docker.DockerClient) -> set[str]:
    """The sandbox containers on the engine now (sampled each second under load: a container lives
    at least as long as its iteration, ~10 s here; the engine's event log keeps too few events)."""
    return {c["Id"] for c in client.api.containers(all=True, filters={"label": "raas.managed=true"})}


def start_and_wait(
    svc: rig.Services,
    running: Stack,
    ids: list[str],
    run: Run,
    timeout_s: float,
    engine: docker.DockerClient | None = None,
) -> None:
    """Start every project at once; sample memory, running iterations, connections and (given the
    engine) sandbox containers until all end."""
    rig.call_all(running, "start", ids)
    deadline = time.monotonic() + timeout_s
    groups = [running.procs[f"worker{i}"].pid for i in range(run.setup.workers)]
    with svc.pg() as conn:
        while True:
            run.peak_memory_kib = max(
                run.peak_memory_kib, sum(rig.group_memory_kib(g, "Pss") for g in groups)
            )
            if engine is not None:
                run.containers_seen |= sandbox_ids(engine)
            row = conn.execute(
                "SELECT (SELECT count(*) FROM iterations WHERE status = 'running' AND project_id = ANY(%s)),"
                " (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()) - 1,"
                " (SELECT count(*) FROM projects WHERE id = ANY(%s) AND status = ANY(%s))",
                (ids, ids, TERMINAL),
            ).fetchone()
            assert row is not None
            run.peak_running = max(run.peak_running, row[0])
            run.peak_connections = max(run.peak_connections, row[1])
            if row[2] == len(ids):
                return
            if time.monotonic() > deadline:
                msg = f"only {row[2]} of {len(ids)} projects ended within {timeout_s:.0f}s"
                raise TimeoutError(msg)
            time.sleep(1)


def components(running: Stack, workers: int, postmaster: int) -> cpu.Components:
    parts = cpu.Components()
    parts.groups("worker processes", [running.procs[f"worker{i}"].pid for i in range(workers)])
    parts.groups("coordinator", [running.procs["coordinator"].pid])
    parts.groups("scripted model", [running.procs["scripted-model"].pid])
    parts.named("Docker engine", cpu.DOCKER)
    parts.tree("Postgres", postmaster)
    parts.named("Redis", ["redis-server"])
    return parts


def measure(svc: rig.Services, postmaster: int, setup: Setup, args: argparse.Namespace) -> Run:
    run = Run(setup)
    left_behind: list[str] = []
    engine_client = docker.from_env()
    with rig.workdir() as workdir, closing(engine_client):
        env = {"RAAS_TASK_CONTAINER_IDLE_S": "0"} if args.no_reuse else None
        stack = rig.stack(
            svc, workdir, script(args.delay), setup.workers, setup.concurrency, env, left_behind, setup.pool
        )
        with stack as running:
            rig.wait_workers_ready(running, setup.workers)
            run.idle_memory_kib = sum(
                rig.group_memory_kib(running.procs[f"worker{i}"].pid, "Pss") for i in range(setup.workers)
            )
            toml = raas_toml(args.iterations)
            # Low load: two projects alone.
            low = rig.create_projects(running, 2, toml, f"{setup.name}-low")
            start_and_wait(svc, running, low, Run(setup), timeout_s=120 + 8 * args.delay * args.iterations)
            engine = cpu.Components()
            engine.named("Docker engine", cpu.DOCKER)
            raw_before, raw_count = engine.sample(), max(20, 2 * setup.slots)
            run.raw_containers_per_s = raw_container_rate(setup.slots, raw_count)
            raw_spent = cpu.spent(raw_before, engine.sample())
            run.raw_cpu_s = {name: spent / raw_count for name, spent in raw_spent.items()}
            ids = rig.create_projects(running, setup.projects, toml, f"{setup.name}-load")
            timeout_s = 300 + 4 * args.delay * args.iterations * setup.projects / setup.slots
            parts = components(running, setup.workers, postmaster)
            before, already = parts.sample(), sandbox_ids(engine_client)
            start_and_wait(svc, running, ids, run, timeout_s, engine_client)
            run.cpu_s = cpu.spent(before, parts.sample())
            run.containers_seen -= already
    run.load = load_span(svc, ids)
    run.phases = {"low load": phases_of(svc, low), "under load": phases_of(svc, ids)}
    run.low_iteration_s = rig.median(run.phases["low load"]["iteration"])
    run.checks = integrity_checks(svc, low + ids, [], args.iterations)
    run.checks.append(
        Check(
            "no sandbox left after the workers stopped",
            not left_behind,
            f"{len(left_behind)} left (removed): {', '.join(left_behind[:4])}" if left_behind else "none",
        )
    )
    return run


def table_of(a: Run, b: Run) -> Table:
    table = Table(
        checks=[Check(f"({r.setup.name}) {c.name}", c.ok, c.detail) for r in (a, b) for c in r.checks]
    )
    for run in (a, b):
        table.figures.append(
            Figure(
                f"({run.setup.name}) iterations/s",
                run.throughput,
                run.ideal,
                "/s",
                "ideal: min(slots / low-load iteration, raw docker run --rm rate)",
                goal_min=0.8 if run is b else None,
            )
        )
    table.figures.append(
        Figure(
            "(b) machine CPU per iteration",
            b.machine_cpu_per_iteration,
            b.raw_cpu_s.get("machine (every process)", 0.0),
            "CPU s",
            "a raw docker run --rm, machine CPU per container",
            goal_max=1.0,
        )
    )
    table.figures.append(
        Figure("(b) iterations/s against (a)", b.throughput, a.throughput, "/s", "(a) prefork", goal_min=10)
    )
    table.figures.append(
        Figure(
            "worker PSS per running iteration",
            b.memory_per_iteration_mib,
            a.memory_per_iteration_mib,
            "MiB",
            "(a) prefork, same measure",
            goal_max=0.1,
        )
    )
    return table


def print_report(args: argparse.Namespace, a: Run, b: Run, table: Table) -> None:
    print(
        f"density benchmark: model delay {args.delay:g} s per call, 2 calls and 1 bash call per iteration, "
        f"{args.iterations} iterations per project; (a) {a.setup.workers} prefork workers x "
        f"{a.setup.concurrency} on {a.setup.projects} projects, (b) 1 threads worker x {b.setup.concurrency} "
        f"on {b.setup.projects} projects; task containers {'not ' if args.no_reuse else ''}reused"
    )
    print(f"machine: {rig.machine()}")
    table.print()
    print()
    for run in (a, b):
        first, last, iterations = run.load
        slots = run.setup.slots
        print(
            f"({run.setup.name}) {iterations} iterations in {last - first:.1f} s; iteration at low load "
            f"{run.low_iteration_s:.2f} s -> {slots} slots / iteration {slots / run.low_iteration_s:.2f}/s; "
            f"raw docker run --rm x{slots} {run.raw_containers_per_s:.2f}/s (CPU s per container: Docker "
            f"engine {run.raw_cpu_s.get('Docker engine', 0.0):.3f}, inside it "
            f"{run.raw_cpu_s.get('inside the containers', 0.0):.3f}, machine "
            f"{run.raw_cpu_s.get('machine (every process)', 0.0):.3f}); peak {run.peak_running} "
            f"running, {run.peak_connections} database connections; worker PSS idle "
            f"{run.idle_memory_kib / 1024:.0f} MiB, peak {run.peak_memory_kib / 1024:.0f} MiB; "
            f"{len(run.containers_seen)} containers under load, "
            f"{len(run.containers_seen) / max(1, iterations):.2f} per iteration"
        )
        bound = container_bound(run.setup, run.raw_containers_per_s, run.low_iteration_s, args.iterations)
        print(
            f"    a system costing nothing but the raw container would do {bound:.2f}/s in this load "
            f"({bound / run.ideal:.3f}x the ideal: its first wave waits for containers, its last drains)"
        )
    print("\nwhere an iteration's time goes (median / 90th percentile, s):")
    for run in (a, b):
        print_phases(f"({run.setup.name})", run.phases)
    cores = os.cpu_count() or 1
    print(f"\nCPU over the load, seconds per iteration ({cores} cores):")
    for run in (a, b):
        first, last, iterations = run.load
        machine = run.cpu_s.get("machine (every process)", 0.0)
        ours = sum(v for k, v in run.cpu_s.items() if k != "machine (every process)")
        parts = ", ".join(f"{k} {v / iterations:.3f}" for k, v in run.cpu_s.items())
        busy = machine / (last - first) / cores
        print(
            f"({run.setup.name}) {parts}; the machine was {busy:.0%} busy, "
            f"{ours / max(machine, 1e-9):.0%} of it this stack"
        )
        per_iteration, got = ours / iterations, ours / (last - first)
        print(
            f"    the stack's {per_iteration:.3f} CPU s per iteration allow {cores / per_iteration:.2f}/s on "
            f"{cores} idle cores; it got {got:.2f} cores, enough for {got / per_iteration:.2f}/s"
        )
        raw, each = run.raw_cpu_s.get("machine (every process)", 0.0), machine / iterations
        print(
            f"    an iteration cost the machine {each:.3f} CPU s, {each / raw:.2f}x a raw docker run --rm "
            f"({raw:.3f}): {cores} busy cores do at most {cores / each:.2f}/s"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--projects", type=int, default=100, help="projects of (b), started at once")
    parser.add_argument("--delay", type=float, default=5.0, help="seconds the model takes per call")
    parser.add_argument("--concurrency", type=int, default=100, help="threads of (b)'s one worker")
    parser.add_argument("--iterations", type=int, default=5, help="iterations of each project")
    parser.add_argument("--prefork-workers", type=int, default=2, help="prefork workers of (a)")
    parser.add_argument("--prefork-concurrency", type=int, default=2, help="processes per prefork worker")
    parser.add_argument("--prefork-projects", type=int, default=12, help="projects of (a), started at once")
    parser.add_argument(
        "--no-reuse", action="store_true", help="a container per iteration (RAAS_TASK_CONTAINER_IDLE_S=0)"
    )
    args = parser.parse_args()
    a = Setup("a", "prefork", args.prefork_workers, args.prefork_concurrency, args.prefork_projects)
    b = Setup("b", "threads", 1, args.concurrency, args.projects)
    with private_services() as (svc, postmaster):
        run_a, run_b = measure(svc, postmaster, a, args), measure(svc, postmaster, b, args)
    table = table_of(run_a, run_b)
    print_report(args, run_a, run_b, table)
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
