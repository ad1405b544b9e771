"""Fault tests: a real stack (scripted model, coordinator and workers as separate processes) on
services of its own, one fault injected while an iteration runs, and the same checks after it.

Private services, never the machine's shared ones (other sessions use 127.0.0.1:5432, :6379 and
dockerd): every test gets a Redis server on a free loopback port (also its broker, so no other
test session's worker can take its messages); the database test gets a PostgreSQL cluster of its
own; the Docker test puts a Unix-socket proxy it can cut between the workers and the engine.

What every test checks after its fault (:func:`verify`): the project completed; the follower's
events are seq 1..N with no gap and equal the database's; no message is stored twice per
(iteration, attempt, seq) and none is missing inside an attempt; every reply the model sent is
stored once (only a reply cut off by the fault itself may be missing); spent == the sum of the
messages' costs == the agents' == the iterations' == the ledger's settlements, nothing stays
reserved; every iteration finished, succeeded and was advanced, its ``iteration_started`` events
are its attempts 1..n and it ended with one event; every file the agent wrote is in the
workspace; and no container labelled with the project is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import (
    Agent,
    Event,
    Iteration,
    IterationStatus,
    LedgerEntry,
    LedgerKind,
    Message,
    Project,
    ProjectStatus,
)
from shared.schemas import EventOut
from tests.support.loopback import free_port
from tests.support.proxies import UnixSocketProxy
from tests.support.stack import RAAS, Stack, parse_json_lines, wait_http

# Recovery within seconds, in the proportions of the defaults (beat 5 s, stale 30 s): a worker
# is declared lost after 8 s of silence, the reconcile loop runs every second, a queued message
# is sent again after 6 s, and a worker sweeps orphan sandboxes every 2 s (default 30 s: a dead
# worker's container would otherwise stay up to 30 s after its iteration was re-run).
RECOVERY_ENV = {
    "RAAS_HEARTBEAT_INTERVAL_S": "0.5",
    "RAAS_HEARTBEAT_STALE_S": "8",
    "RAAS_RECONCILE_INTERVAL_S": "1",
    "RAAS_REQUEUE_AFTER_S": "6",
    "RAAS_SANDBOX_SWEEP_INTERVAL_S": "2",
}
USAGE = {
    "input_tokens": 1000,
    "output_tokens": 50,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
PG_BIN = (
    sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1] if Path("/usr/lib/postgresql").exists() else None
)
DOCKER_SOCKET = "/var/run/docker.sock"
# The workers sweep every 2 s here (RECOVERY_ENV): an orphan is gone well within this.
CONTAINERS_GONE_S = 45.0


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout_s:.0f}s waiting for {what}"
            raise TimeoutError(msg)
        time.sleep(interval_s)


# --- private services ---------------------------------------------------------------------------


@dataclass
class PrivateRedis:
    """A Redis server without persistence on a free loopback port: a restart empties it."""

    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        client = redis.Redis.from_url(self.url())
        try:
            wait_until(lambda: self._pings(client), 10, f"redis on port {self.port}")
        finally:
            client.close()

    @staticmethod
    def _pings(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of its own, owned by the ``postgres`` user (initdb refuses root)."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        assert PG_BIN is not None
        command = ["runuser", "-u", "postgres", "--", str(PG_BIN / args[0]), *args[1:]]
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=60)
        if done.returncode:
            msg = f"{' '.join(args[:1])} failed: {done.stdout}{done.stderr}"
            raise RuntimeError(msg)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.root / "data"), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.root / "data"), "-o", options, "-l", str(self.root / "pg.log"),
            "-w", "-t", "30", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``immediate`` is a crash: SIGQUIT, every connection dropped, recovery at the next start."""
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return (self.root / "data" / "postmaster.pid").exists()


class DockerSocketProxy(UnixSocketProxy):
    """A Unix socket in front of the Docker engine's: cut, the workers lose Docker (connects
    refused, ``docker exec`` streams aborted) while the engine itself never notices."""

    def __init__(self, path: Path, upstream: str = DOCKER_SOCKET) -> None:
        super().__init__(path, upstream)

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"


# --- the project and its script -----------------------------------------------------------------


def note_path(number: int) -> str:
    return f"notes/{number}.md"


def work_step(number: int, sleep_s: float, latency_s: float) -> dict[str, Any]:
    """Write a note, then run bash in the sandbox for ``sleep_s`` (the window a fault lands in)."""
    return {
        "content": [
            {"type": "text", "text": f"Iteration {number}: writing note {number}."},
            {"type": "tool_use", "name": "write",
             "input": {"path": note_path(number), "content": f"note {number}\n"}},
            {"type": "tool_use", "name": "bash",
             "input": {"command": f"sleep {sleep_s}; cat {note_path(number)}"}},
        ],
        "usage": USAGE,
        "latency_s": latency_s,
    }  # fmt: skip


def end_step(number: int, last: bool, latency_s: float) -> dict[str, Any]:
    if last:
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "name": "task_complete", "input": {"summary": f"{number} notes written"}}
        ]
    else:
        content = [{"type": "text", "text": f"Note {number} is written; the next iteration goes on."}]
    return {"content": content, "usage": USAGE, "latency_s": latency_s}


def ralph_script(
    iterations: int = 5,
    *,
    sleep_s: float = 2.0,
    window: int = 2,
    latency_s: float = 0.3,
    before: dict[int, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Iteration k writes notes/k.md and runs bash, then ends its turn; the last one calls
    task_complete, which answers every request after the script's end too, so a re-run attempt
    (which takes the next steps, not the same ones) still leads to completion.

    ``window``: the iteration whose bash sleeps ``sleep_s`` (the one the fault lands in); the
    others' bash returns at once. ``before[k]``: steps answered before iteration k's first call
    (injected errors).
    """
    responses: list[dict[str, Any]] = []
    for number in range(1, iterations + 1):
        responses += (before or {}).get(number, [])
        responses.append(work_step(number, sleep_s if number == window else 0, latency_s))
        responses.append(end_step(number, number == iterations, latency_s))
    return {"responses": responses, "when_exhausted": "repeat_last"}


def write_project(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "PROMPT.md").write_text(
        "Write one note per iteration under notes/, then say you are done.\n"
    )
    (directory / "raas.toml").write_text(
        'name = "fault"\nmodel = "claude-sonnet-4-6"\nmax_iterations = 20\nmax_turns = 10\n'
        'max_tokens = 1024\n\n[budget]\nlimit_usd = 5\n\n[sandbox]\nmemory = "256m"\n'
    )
    return directory


# --- the rig: a stack, its projects and followers -------------------------------------------------


@dataclass
class Follower:
    """``raas follow ID --json`` as its own process, output to files."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return -9

    def events(self) -> list[dict[str, Any]]:
        return parse_json_lines(self.out.read_text())

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")[-2000:]


@dataclass
class Rig:
    stack: Stack
    database_url: str
    script: dict[str, Any]
    work_dir: Path
    projects: list[str] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)

    # Given ...

    def submit(self) -> str:
        project_dir = write_project(self.work_dir / f"project-{len(self.projects)}")
        submitted = self.stack.cli("submit", str(project_dir), "--json")
        assert submitted.returncode == 0, submitted.stderr + self.stack.logs()
        project_id: str = json.loads(submitted.stdout)["id"]
        self.projects.append(project_id)
        return project_id

    def follow(self, project_id: str) -> Follower:
        name = f"follow-{project_id}"
        out, err = self.stack.log_dir / f"{name}.jsonl", self.stack.log_dir / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [*RAAS, "follow", project_id, "--json"],
                env=self.stack.env, stdout=stdout, stderr=stderr, start_new_session=True,
            )  # fmt: skip
        follower = Follower(proc, out, err)
        self.followers.append(follower)
        return follower

    # When ...

    def wait_for_tool(
        self, project_id: str, number: int, tool: str = "bash", timeout_s: float = 90
    ) -> Iteration:
        """The root agent's iteration ``number`` once it is running and has called ``tool``."""

        def running() -> Iteration | None:
            with session_scope(self.database_url) as session:
                iteration = session.scalar(
                    select(Iteration).where(Iteration.project_id == project_id, Iteration.number == number)
                )
                if iteration is None or iteration.status != IterationStatus.RUNNING:
                    return None
                called = session.scalars(
                    select(Event.data).where(
                        Event.iteration_id == iteration.id, Event.type == "agent_tool_call"
                    )
                ).all()
                return iteration if any(data.get("tool") == tool for data in called) else None

        found: Iteration = wait_until(running, timeout_s, f"iteration {number} to call {tool}", 0.1)
        return found

    def wait_for_model_call(self, project_id: str, count: int, timeout_s: float = 90) -> None:
        """Until the scripted model has received ``count`` requests of the project."""

        def received() -> bool:
            return sum(1 for r in self.stack.model_requests() if r["session"] == project_id) >= count

        wait_until(received, timeout_s, f"model call {count} of {project_id}", 0.05)

    def worker_process(self, iteration: Iteration) -> str:
        """The stack's name of the worker process running ``iteration`` (``worker0`` for ``w0@host``)."""
        assert iteration.worker, iteration
        return "worker" + iteration.worker.split("@")[0].removeprefix("w")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal a stack process and all of its children (a prefork worker's pool included)."""
        proc = self.stack.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def start_coordinator(self) -> None:
        port = self.stack.coordinator_port
        proc = self.stack.spawn("coordinator", ["coordinator", "--port", str(port)])
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)

    def wait_settled(self, project_id: str, timeout_s: float = 150) -> ProjectStatus:
        """Wait for the project to end (or pause: a paused project is settled, and a failure)."""
        ended = {ProjectStatus.COMPLETED, ProjectStatus.FAILED, ProjectStatus.STOPPED, ProjectStatus.PAUSED}

        def status() -> ProjectStatus | None:
            with session_scope(self.database_url) as session:
                current = session.scalar(select(Project.status).where(Project.id == project_id))
            return current if current in ended else None

        settled: ProjectStatus = wait_until(status, timeout_s, f"project {project_id} to end", 0.5)
        return settled

    def explain(self) -> str:
        """The processes' logs, for an assertion message."""
        return "\n" + self.stack.logs()

    def close(self) -> None:
        for follower in self.followers:
            if follower.proc.poll() is None:
                os.killpg(follower.proc.pid, signal.SIGKILL)
                follower.proc.wait()
        self.stack.stop()
        for project_id in self.projects:
            ids = containers_of(project_id)
            if ids:
                subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def containers_of(project_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=raas.project={project_id}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


# --- what every fault test checks -----------------------------------------------------------------


@dataclass
class Verdict:
    """What the checks found; ``summary`` says it in one paragraph."""

    project_id: str
    elapsed_s: float
    events: int
    iterations: list[tuple[int, int]]  # (number, attempts)
    messages: int
    replies: int
    cut_replies: int
    spent_usd: Decimal
    notes: int
    containers_waited_s: float
    retries: int = 0

    def summary(self, broke: str) -> str:
        attempts = ", ".join(f"#{n}×{a}" for n, a in self.iterations)
        cut = f" ({self.cut_replies} cut off by the fault itself)" if self.cut_replies else ""
        checked = [
            f"project {self.project_id} completed {self.elapsed_s:.0f}s after submission in "
            f"{len(self.iterations)} iterations (attempts {attempts}), each succeeded, advanced once "
            "and announced once per attempt",
            f"the follower saw {self.events} events, seq 1..{self.events} gapless, equal to the database's",
            f"{self.messages} messages with no duplicate (iteration, attempt, seq) and no gap",
            f"{self.replies} model replies stored once each{cut}",
            f"spent ${self.spent_usd} == sum of message costs == agents' == iterations' == ledger "
            "settlements, nothing left reserved",
            f"{self.notes} notes the agent wrote all in the workspace",
            f"no container labelled raas.project={self.project_id} left "
            f"(gone {self.containers_waited_s:.0f}s after completion)",
        ]
        return f"BROKE: {broke} CHECKED: {'; '.join(checked)}."


def verify(
    rig: Rig,
    project_id: str,
    follower: Follower,
    submitted_at: float,
    *,
    cut_replies: int = 0,
    workspace: Callable[[Rig, str], int] | None = None,
) -> Verdict:
    """Every check of the module docstring, all of them run; one failure lists every problem.

    ``cut_replies``: model replies the fault may have cut off in flight (a killed process never
    received them, so they are neither stored nor charged). ``workspace``: the workspace check
    (returning the notes it found) when the notes cannot be read out of the stored write calls
    (an agent CLI's own write shapes); by default every note a succeeded write made.
    """
    problems: list[str] = []

    def check(name: str, run: Callable[[], Any], default: Any = None) -> Any:
        try:
            return run()
        except (AssertionError, TimeoutError) as exc:
            problems.append(f"- {name}: {exc}")
            return default

    try:
        status = rig.wait_settled(project_id)  # a paused or failed project never completes: no waiting
    except TimeoutError as exc:
        raise AssertionError(str(exc) + rig.explain()) from exc
    elapsed = time.monotonic() - submitted_at
    check("project", lambda: _check_completed(rig, project_id, status))
    code = follower.wait(60 if status == ProjectStatus.COMPLETED else 5)  # it ends with the project
    if code != 0:
        problems.append(f"- follower: exited {code}: {follower.stderr().strip()}")
    events = check("events", lambda: _check_events(rig, project_id, follower), [])
    iterations = check("iterations", lambda: _check_iterations(rig, project_id), [])
    messages, replies = check("messages", lambda: _check_messages(rig, project_id, cut_replies), (0, 0))
    spent = check("costs", lambda: _check_costs(rig, project_id), Decimal(0))
    notes = check("workspace", lambda: (workspace or _check_workspace)(rig, project_id), 0)
    started = time.monotonic()
    check(
        "containers",
        lambda: wait_until(lambda: not containers_of(project_id), CONTAINERS_GONE_S, "no container left", 1),
    )
    assert not problems, "\n".join(["the fault was not survived:", *problems]) + rig.explain()
    return Verdict(
        project_id=project_id,
        elapsed_s=elapsed,
        events=len(events),
        iterations=[(it.number, it.attempt) for it in iterations],
        messages=messages,
        replies=replies,
        cut_replies=_answered(rig, project_id) - replies,
        spent_usd=spent,
        notes=notes,
        containers_waited_s=time.monotonic() - started,
        retries=sum(1 for e in events if e["type"] == "llm_retry"),
    )


def _check_completed(rig: Rig, project_id: str, status: ProjectStatus) -> None:
    with session_scope(rig.database_url) as session:
        reason = session.get_one(Project, project_id).status_line
    assert status == ProjectStatus.COMPLETED, f"the project ended {status.value}: {reason}"


def _db_events(database_url: str, project_id: str) -> list[dict[str, Any]]:
    with session_scope(database_url) as session:
        rows = session.scalars(select(Event).where(Event.project_id == project_id).order_by(Event.seq))
        return [EventOut.model_validate(row).model_dump(mode="json") for row in rows]


def _check_events(rig: Rig, project_id: str, follower: Follower) -> list[dict[str, Any]]:
    stored = _db_events(rig.database_url, project_id)
    seen = follower.events()
    assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1)), "the database's seq has a gap"
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1)), (
        f"follower seq not 1..N: {[e['seq'] for e in seen]}"
    )
    for mine, theirs in zip(seen, stored, strict=False):
        assert mine == theirs, f"follower's event differs from the database's:\n{mine}\n{theirs}"
    assert len(seen) == len(stored), f"the follower saw {len(seen)} events, the database has {len(stored)}"
    assert seen[-1]["type"] == "project_completed", seen[-1]
    return seen


def _check_iterations(rig: Rig, project_id: str) -> list[Iteration]:
    with session_scope(rig.database_url) as session:
        iterations = list(
            session.scalars(
                select(Iteration).where(Iteration.project_id == project_id).order_by(Iteration.number)
            )
        )
        announced = session.execute(
            select(Event.iteration_id, Event.type, Event.data).where(
                Event.project_id == project_id,
                Event.type.in_(["iteration_started", "iteration_complete", "iteration_error"]),
            )
        ).all()
    starts: dict[str, list[int]] = defaultdict(list)
    ends: Counter[str] = Counter()
    for iteration_id, type_, data in announced:
        if type_ == "iteration_started":
            starts[iteration_id].append(int(data["attempt"]))
        else:
            ends[iteration_id] += 1
    assert [it.number for it in iterations] == list(range(1, len(iterations) + 1))
    for it in iterations:
        where = f"iteration {it.number} ({it.id}): {it.status} attempt {it.attempt} error {it.error!r}"
        assert it.status == IterationStatus.SUCCEEDED, where
        assert it.advanced, where
        assert sorted(starts[it.id]) == list(range(1, it.attempt + 1)), f"{where}: started {starts[it.id]}"
        assert ends[it.id] == 1, f"{where}: {ends[it.id]} end events"
    assert [it.completed_task for it in iterations].count(True) == 1, "one iteration completes the task"
    assert iterations[-1].completed_task, "the last iteration completes the task"
    return iterations


def _answered(rig: Rig, project_id: str) -> int:
    """Requests of this project the scripted model answered with a message (not an error)."""
    # The script's own steps, and each variant's.
    walks: dict[str | None, list[Any]] = {None: rig.script["responses"]}
    walks.update({variant["name"]: variant["responses"] for variant in rig.script.get("variants", [])})
    return sum(
        1
        for request in rig.stack.model_requests()
        if request["session"] == project_id
        and request["step"] is not None
        and "content" in walks[request.get("variant")][request["step"]]
    )


def _check_messages(rig: Rig, project_id: str, cut_replies: int) -> tuple[int, int]:
    with session_scope(rig.database_url) as session:
        rows = session.execute(
            select(Message.iteration_id, Message.attempt, Message.seq, Message.role).where(
                Message.project_id == project_id
            )
        ).all()
    keys = Counter((r.iteration_id, r.attempt, r.seq) for r in rows)
    assert max(keys.values()) == 1, f"duplicated messages: {[k for k, n in keys.items() if n > 1]}"
    by_attempt: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in rows:
        by_attempt[(r.iteration_id, r.attempt)].append(r.seq)
    for key, seqs in by_attempt.items():
        assert sorted(seqs) == list(range(len(seqs))), f"messages of {key} have a gap: {sorted(seqs)}"
    replies = sum(1 for r in rows if r.role == "assistant")
    answered = _answered(rig, project_id)
    assert replies <= answered, f"{replies} replies stored, the model sent {answered}: one stored twice"
    assert replies >= answered - cut_replies, (
        f"the model sent {answered} replies, only {replies} are stored (at most {cut_replies} may be cut off)"
    )
    return len(rows), replies


def _check_costs(rig: Rig, project_id: str) -> Decimal:
    with session_scope(rig.database_url) as session:
        project = session.get_one(Project, project_id)

        def total(column: Any, *where: Any) -> Decimal:
            return Decimal(session.scalar(select(func.coalesce(func.sum(column), 0)).where(*where)))

        messages = total(Message.cost_usd, Message.project_id == project_id)
        agents = total(Agent.cost_usd, Agent.project_id == project_id)
        iterations = total(Iteration.cost_usd, Iteration.project_id == project_id)
        held = total(Iteration.reserved_usd, Iteration.project_id == project_id)
        settled = total(
            LedgerEntry.amount_usd,
            LedgerEntry.project_id == project_id,
            LedgerEntry.kind == LedgerKind.SETTLE,
        )
        reserved = total(
            LedgerEntry.amount_usd,
            LedgerEntry.project_id == project_id,
            LedgerEntry.kind == LedgerKind.RESERVE,
        )
        released = total(
            LedgerEntry.released_usd,
            LedgerEntry.project_id == project_id,
            LedgerEntry.kind == LedgerKind.SETTLE,
        )
    costs = {"messages": messages, "agents": agents, "iterations": iterations, "ledger": settled}
    assert project.spent_usd > 0
    assert all(value == project.spent_usd for value in costs.values()), f"spent {project.spent_usd}: {costs}"
    assert project.reserved_usd == 0 == held, (
        f"still reserved: project {project.reserved_usd}, iterations {held}"
    )
    assert reserved == released, f"reserved {reserved} in the ledger, released {released}"
    return project.spent_usd


def written_notes(database_url: str, project_id: str) -> dict[str, str]:
    """Every note a succeeded attempt of the project's iterations wrote (its write returned no
    error): workspace path -> content."""
    with session_scope(database_url) as session:
        final = {
            it.id: it.attempt
            for it in session.scalars(
                select(Iteration).where(
                    Iteration.project_id == project_id, Iteration.status == IterationStatus.SUCCEEDED
                )
            )
        }
        rows = session.execute(
            select(Message.iteration_id, Message.attempt, Message.content).where(
                Message.project_id == project_id
            )
        ).all()
    blocks = [b for r in rows if final.get(r.iteration_id) == r.attempt for b in r.content]
    failed = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result" and b.get("is_error")}
    notes = {
        _written_path(b["input"]): b["input"]["content"]
        for b in blocks
        if b.get("type") == "tool_use" and b.get("name") in ("write", "Write") and b["id"] not in failed
    }
    notes.pop(".raas/complete", None)  # a harness's completion file is taken out of the commit
    return notes


def _check_workspace(rig: Rig, project_id: str) -> int:
    """Every note a succeeded attempt wrote (its write returned no error) is in the workspace."""
    notes = written_notes(rig.database_url, project_id)
    bare = Path(rig.stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    for path, content in notes.items():
        shown = subprocess.run(
            ["git", "-C", str(bare), "show", f"main:{path}"], capture_output=True, text=True, check=False
        )
        assert shown.stdout == content, f"{path} is not in the workspace as written: {shown.stderr}"
    assert notes, "the agent wrote nothing"
    return len(notes)


def _written_path(args: dict[str, Any]) -> str:
    """The workspace path of a write: ours (``path``), Claude Code's (``file_path``, absolute) or
    OpenCode's (``filePath``, absolute)."""
    if "path" in args:
        return str(args["path"])
    return str(args.get("file_path", args.get("filePath"))).removeprefix("/workspace/")


# --- fixtures -----------------------------------------------------------------------------------
