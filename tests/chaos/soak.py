"""One soak: start the cluster on its own services, submit the projects on their schedule while the
faults land on theirs, let everything settle (resuming what a fault left paused), then check.

The cluster is real processes, as the fault tests run them (:mod:`tests.support.stack`): the
scripted model, one coordinator (or two behind HAProxy), ``workers`` workers, one follower
(``raas follow ID --json``) per followed project; the git server and the fake forge run in this
process on loopback. Recovery is made to happen in seconds (the fault tests' ``RECOVERY_ENV``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import select

from shared.db import get_engine, session_scope
from shared.migrate import upgrade
from shared.models import PauseReason, Project, ProjectStatus
from tests.support.faults import RECOVERY_ENV, Rig
from tests.support.forge import FakeForge, serve_forge
from tests.support.git_server import GitServer, serve_git
from tests.support.stack import RAAS, Stack, wait_http

from . import checks
from .schedule import COORDINATOR, DOCKER, POSTGRES, REDIS, STORE, WORKER, Fault, plan_faults
from .services import Services
from .workload import REPO, ProjectPlan, plan_projects, script

# Projects are submitted over this share of the soak, so the last ones still meet faults.
SUBMIT_SHARE = 0.6
SETTLE_S = 600.0
SUBMITTERS = 4
# A submission is tried for this long, each try given SUBMIT_TRY_S: on a starved machine (load 20
# on 2 cores) one `raas --help` took 3 minutes.
SUBMIT_S = 900.0
SUBMIT_TRY_S = 300.0
# What `raas` says when the coordinator (or its database) is away: a submission is tried again.
# (The API answers 503 when its database or its workspace store does not; raas prints the reason.)
UNAVAILABLE = (
    "does not answer",
    "lost the coordinator",
    "unavailable",
    "could not connect",
    "502",
    "503",
    "504",
)


@dataclass(frozen=True)
class SoakConfig:
    minutes: float = 3.0
    projects: int = 6
    seed: int = 339  # its 3 minutes: all six kinds of fault among 9; pr, local, budget, two workflows, a CLI
    interval_s: float = 20.0  # mean seconds between faults
    workers: int = 2
    concurrency: int = 2
    followers: int = 8  # projects followed by a `raas follow` process (the first ones)
    docker: str = "private"  # a dockerd of its own; "cut": a proxy to the machine's; "restart": the machine's
    store: str = "s3"  # workspaces in an S3 API server (moto); "local": the coordinators' disk
    replicas: int = 2  # coordinators behind HAProxy; 1: one, no balancer
    keep: bool = False  # keep the soak's directory (logs, data) even when every check passed


@dataclass
class SoakResult:
    config: SoakConfig
    table: checks.Table
    faults: list[str]
    root: Path
    elapsed_s: float
    subjects: list[checks.Subject] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.table.ok

    def report(self) -> str:
        c = self.config
        kinds = Counter(s.plan.kind for s in self.subjects)
        fault_kinds = Counter(f.split()[1].rstrip("0123456789") for f in self.faults)
        head = [
            f"chaos soak: seed {c.seed}, {c.minutes:g} min, {len(self.subjects)} projects "
            f"({_counts(kinds)}); "
            f"{c.workers} workers x{c.concurrency}, {c.replicas} coordinator(s), docker {c.docker}, "
            f"store {c.store}; ran {self.elapsed_s / 60:.1f} min",
            f"faults ({len(self.faults)}): {_counts(fault_kinds)}",
            *(f"  {line}" for line in self.faults),
            "",
            self.table.render(),
            "",
            f"replay: bash scripts/chaos.sh --minutes {c.minutes:g} --projects {c.projects} --seed {c.seed}"
            + (f" --docker {c.docker}" if c.docker != "private" else "")
            + (f" --store {c.store}" if c.store != "s3" else "")
            + (f" --replicas {c.replicas}" if c.replicas != 2 else ""),
        ]
        if not self.ok or c.keep:
            head.append(f"logs and data: {self.root}")
        return "\n".join(head)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {n}" for key, n in sorted(counter.items()))


class Cluster:
    """The stack's processes on the soak's services, and the faults that land on them."""

    def __init__(
        self, config: SoakConfig, services: Services, root: Path, say: Callable[[str], None]
    ) -> None:
        self.config = config
        self.services = services
        self.root = root
        self.say = say
        self.script = script()
        script_path = root / "script.json"
        script_path.write_text(json.dumps(self.script))
        self.stack = Stack(
            log_dir=root / "logs",
            script=script_path,
            env={
                **RECOVERY_ENV,
                **services.env(),
                "RAAS_DATA_DIR": str(root / "data"),
                "RAAS_SECRET_KEY": Fernet.generate_key().decode(),
            },
        )
        self.stack.route_openai("sk-chaos-soak")
        assert services.postgres is not None
        self.rig = Rig(self.stack, services.postgres.url, self.script, root)

    def start(self) -> None:
        model = self.stack.spawn(
            "scripted-model",
            ["scripted-model", "--script", str(self.stack.script), "--port", str(self.stack.model_port)],
        )
        wait_http(f"http://127.0.0.1:{self.stack.model_port}/_scripted/health", proc=model)
        for index in range(self.config.replicas):
            # The soak's cluster is new: its key is the one its replicas must have.
            self.start_coordinator(index, adopt_key=True)
        self.services.start_balancer()
        for index in range(self.config.workers):
            self.stack.spawn_worker(index, self.config.concurrency)

    def start_coordinator(self, index: int, adopt_key: bool = False) -> None:
        port = self.services.coordinator_ports[index]
        env = dict(self.stack.env)
        if self.config.store == "s3":  # nothing of a replica's own disk may matter
            env["RAAS_DATA_DIR"] = str(self.root / f"data-coordinator{index}")
        args = ["coordinator", "--port", str(port)] + (["--adopt-secret-key"] if adopt_key else [])
        name = f"coordinator{index}"
        with (self.stack.log_dir / f"{name}.log").open("ab") as log:  # as Stack.spawn, with env
            proc = subprocess.Popen(
                [*RAAS, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.stack.procs[name] = proc
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout_s=120, proc=proc)

    def apply(self, fault: Fault) -> None:
        if fault.kind == WORKER:
            self.rig.kill(f"worker{fault.target}")
            time.sleep(fault.down_s)
            self.stack.spawn_worker(fault.target, self.config.concurrency)
        elif fault.kind == COORDINATOR:
            self.rig.kill(f"coordinator{fault.target}")
            time.sleep(fault.down_s)
            self.start_coordinator(fault.target)
        elif fault.kind == REDIS:
            self.services.restart_redis(fault.down_s)
        elif fault.kind == POSTGRES:
            self.services.restart_postgres(fault.down_s)
        elif fault.kind == DOCKER:
            self.services.break_docker(fault.down_s)
        elif fault.kind == STORE:
            self.services.break_store(fault.down_s)
        else:
            msg = f"unknown fault {fault.kind}"
            raise ValueError(msg)

    def set_credential(self, server: GitServer) -> None:
        token_file = self.root / "token"
        token_file.write_text(server.password + "\n")
        host = server.base_url.removeprefix("http://")
        done = self.stack.cli(
            "credentials", "set", host, "--username", server.username, "--token-file", str(token_file)
        )
        assert done.returncode == 0, done.stderr

    def submit(self, plan: ProjectPlan, forge: FakeForge, repo_url: str) -> tuple[str, int]:
        """Submit the project, trying again while the cluster recovers from a fault (for
        ``SUBMIT_S``); its id and how many tries it took."""
        directory = plan.write(self.root / "projects" / f"p{plan.index}", forge.url)
        args = ["submit", str(directory), "--json"]
        if plan.from_repo:
            args += ["--repo", repo_url, "--ref", "main", "--prompt-file", str(directory / "PROMPT.md")]
        deadline = time.monotonic() + SUBMIT_S
        tries = 0
        while True:
            tries += 1
            try:
                done = self.stack.cli(*args, timeout_s=SUBMIT_TRY_S)
            except subprocess.TimeoutExpired:  # counted among the extra projects if it made one
                said, unavailable = f"no answer in {SUBMIT_TRY_S:.0f} s", True
            else:
                if done.returncode == 0:
                    return str(json.loads(done.stdout)["id"]), tries
                said = done.stderr.strip()
                unavailable = any(sign in said.lower() for sign in UNAVAILABLE)
            if not unavailable or time.monotonic() > deadline:
                msg = f"submitting project {plan.index} failed: {said}"
                raise RuntimeError(msg)
            time.sleep(2)

    def statuses(self, project_ids: list[str]) -> dict[str, Project]:
        with session_scope(self.rig.database_url) as session:
            rows = list(session.scalars(select(Project).where(Project.id.in_(project_ids))))
            session.expunge_all()
        return {row.id: row for row in rows}

    def settle(self, project_ids: list[str], timeout_s: float) -> dict[str, Project]:
        """Wait until every project has ended or paused (at most ``timeout_s``); their rows."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = self.statuses(project_ids)
            busy = [
                p for p in rows.values() if not (p.status.is_terminal or p.status == ProjectStatus.PAUSED)
            ]
            if not busy or time.monotonic() > deadline:
                return rows
            time.sleep(2)

    def close(self) -> None:
        self.rig.close()


def run(config: SoakConfig, say: Callable[[str], None] = print) -> SoakResult:
    """Run the soak ``config`` describes and check it; ``say`` hears its progress."""
    rng = random.Random(config.seed)
    window_s = config.minutes * 60
    plans = plan_projects(rng, config.projects, window_s * SUBMIT_SHARE)
    faults = plan_faults(
        rng,
        window_s=window_s,
        interval_s=config.interval_s,
        workers=config.workers,
        replicas=config.replicas,
        store=config.store == "s3",
    )
    root = Path(tempfile.mkdtemp(prefix="raas-chaos-"))
    started = time.monotonic()
    say(f"chaos soak in {root}: seed {config.seed}, {len(plans)} projects, {len(faults)} faults planned")
    services = Services(root, docker_mode=config.docker, store=config.store, replicas=config.replicas)
    table = checks.Table()
    done_faults: list[str] = []
    refused: list[str] = []
    subjects: list[checks.Subject] = []
    docker_host = os.environ.get("DOCKER_HOST")
    try:
        services.start()
        assert services.postgres is not None
        upgrade(services.postgres.url)
        if services.dockerd is not None:  # this process's own docker calls (checks, cleanup) too
            os.environ["DOCKER_HOST"] = services.dockerd.docker_host
        with _world(root) as (server, forge, repo_url):
            cluster = Cluster(config, services, root, say)
            try:
                cluster.start()
                cluster.set_credential(server)
                _timeline(
                    cluster,
                    plans,
                    faults,
                    forge,
                    repo_url,
                    subjects,
                    done_faults,
                    refused,
                    time.monotonic(),
                    say,
                )
                for problem in refused:  # a submission the cluster refused for good
                    table.ran["ended or resumed"] += 1
                    table.problems.setdefault("ended or resumed", []).append(f"submission of {problem}")
                _settle_and_resume(cluster, subjects, say)
                _check_all(cluster, subjects, server, forge, table, say)
            finally:
                cluster.close()
    finally:
        if services.postgres is not None:
            get_engine(services.postgres.url).dispose()
        services.stop()
        if docker_host is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = docker_host
    result = SoakResult(config, table, done_faults, root, time.monotonic() - started, subjects)
    if result.ok and not config.keep:
        shutil.rmtree(root, ignore_errors=True)
        if services.postgres is not None:
            shutil.rmtree(services.postgres.root, ignore_errors=True)
    return result


@contextmanager
def _world(root: Path) -> Iterator[tuple[GitServer, FakeForge, str]]:
    """The loopback git server (``alice/app`` with a README on main) and the fake forge."""
    with serve_git(root / "served") as server, serve_forge(token=server.password) as forge:
        url = server.create_repo(REPO, {"README.md": "hello\n"})
        yield server, forge, url


def _timeline(
    cluster: Cluster,
    plans: list[ProjectPlan],
    faults: list[Fault],
    forge: FakeForge,
    repo_url: str,
    subjects: list[checks.Subject],
    done_faults: list[str],
    refused: list[str],
    started: float,
    say: Callable[[str], None],
) -> None:
    """The faults in order, one at a time (a fault's piece is back before the next one), on
    this thread; the submissions at their times meanwhile, up to ``SUBMITTERS`` at once (a
    ``raas submit`` takes seconds, and tens on a loaded machine). Late ones happen at once."""
    lock = threading.Lock()

    def submit(plan: ProjectPlan) -> None:
        time.sleep(max(0.0, started + plan.at_s - time.monotonic()))
        try:
            project_id, tries = cluster.submit(plan, forge, repo_url)
        except RuntimeError as exc:  # refused for good: a problem of the table, not the end
            with lock:
                refused.append(f"project {plan.index} ({plan.kind}): {exc}")
            say(f"t+{time.monotonic() - started:.0f}s {exc}")
            return
        with lock:
            subject = checks.Subject(plan, project_id)
            if len(subjects) < cluster.config.followers:
                subject.follower = cluster.rig.follow(project_id)
            subjects.append(subject)
            cluster.rig.projects.append(project_id)
        retried = f" ({tries} tries)" if tries > 1 else ""
        say(f"t+{time.monotonic() - started:.0f}s submitted {plan.kind} project {project_id}{retried}")

    with ThreadPoolExecutor(SUBMITTERS, thread_name_prefix="submit") as pool:
        submitted = [pool.submit(submit, plan) for plan in plans]
        for fault in faults:
            time.sleep(max(0.0, started + fault.at_s - time.monotonic()))
            now = time.monotonic() - started
            cluster.apply(fault)
            line = f"t+{now:.0f}s {fault.describe().split(' ', 1)[1]}"
            done_faults.append(line)
            say(line)
        for future in submitted:
            future.result()  # a submission that failed for good fails the soak here


def _settle_and_resume(cluster: Cluster, subjects: list[checks.Subject], say: Callable[[str], None]) -> None:
    """Every project ended or paused; one paused for anything but its budget is resumed once
    (``raas resume``) and awaited again."""
    ids = [s.project_id for s in subjects]
    rows = cluster.settle(ids, SETTLE_S)
    for subject in subjects:
        row = rows[subject.project_id]
        if row.status == ProjectStatus.PAUSED and row.pause_reason != PauseReason.BUDGET_EXCEEDED:
            done = cluster.stack.cli("resume", subject.project_id)
            subject.resumed = True
            say(f"resumed {subject.project_id} (paused: {row.status_reason}): exit {done.returncode}")
    if any(s.resumed for s in subjects):
        cluster.settle(ids, SETTLE_S)


def _check_all(
    cluster: Cluster,
    subjects: list[checks.Subject],
    server: GitServer,
    forge: FakeForge,
    table: checks.Table,
    say: Callable[[str], None],
) -> None:
    rig = cluster.rig
    effects = replies = seen = 0
    spent = Decimal(0)
    ratio = Decimal(0)
    for subject in subjects:
        pid = subject.project_id
        table.record("ended or resumed", pid, lambda s=subject: checks.check_ended(rig, s))
        effects += (
            table.record("effects once", pid, lambda s=subject: checks.check_effects(rig, s, server)) or 0
        )
        charged = table.record("LLM calls charged once", pid, lambda s=subject: checks.check_charges(rig, s))
        if charged:
            replies, spent = replies + charged[0], spent + charged[1]
        table.record("budget held", pid, lambda s=subject: checks.check_budget(rig, s))
        row = checks.project_row(rig.database_url, pid)
        ratio = max(ratio, row.spent_usd / row.budget_limit_usd)
        seen += table.record("events", pid, lambda s=subject: checks.check_events(rig, s)) or 0
        table.record("delivered once", pid, lambda s=subject: checks.check_delivery(rig, s, server, forge))
        table.record("nothing left", pid, lambda s=subject: checks.check_nothing_left(rig, s))
    leases = table.record("nothing left", "cluster", lambda: checks.check_leases(rig)) or 0
    in_store = ""
    if cluster.config.store == "s3":
        store = cluster.services.workspace_store(cluster.root / "store-check")
        objects = table.record("nothing left", "store", lambda: checks.check_store(rig, store))
        if objects:
            in_store = f"; store: {objects[0]} orphan(s) swept, {objects[1]} object(s) left"
    rows = cluster.statuses([s.project_id for s in subjects])
    ends = Counter(
        row.status.value + (f" ({row.pause_reason.value})" if row.pause_reason else "")
        for row in rows.values()
    )
    resumed = sum(1 for s in subjects if s.resumed)
    with session_scope(rig.database_url) as session:
        # A submission tried again after its project was made but not started leaves one more.
        extra = len(session.scalars(select(Project.id)).all()) - len(subjects)
    table.notes["ended or resumed"] = (
        ", ".join(f"{k} {n}" for k, n in sorted(ends.items()))
        + f"; resumed {resumed}; {extra} more made by retried submissions"
    )
    table.notes["effects once"] = f"{effects} effect lines"
    table.notes["LLM calls charged once"] = f"{replies} replies, ${spent} spent"
    table.notes["budget held"] = f"highest spent/limit {ratio:.2f}"
    followed = sum(1 for s in subjects if s.follower is not None)
    table.notes["events"] = f"{followed} followers saw {seen} events"
    pulls = sum(1 for p in forge.pulls(REPO))
    branches = sum(1 for b in server.branches(REPO) if b.startswith("raas/") and b.endswith("/project"))
    table.notes["nothing left"] = (
        f"projects and the cluster; {leases} lease(s) in force, held by live replicas{in_store}"
    )
    table.notes["delivered once"] = f"{branches} project branches, {pulls} pull requests"
    say("checked")
