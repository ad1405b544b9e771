"""Real processes for end-to-end tests: scripted model, coordinator and workers.

Each runs as its own ``raas`` process with its own log file, on loopback ports chosen free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from shared.db import session_scope
from shared.models import Iteration, IterationStatus, Project, ProjectStatus, unfinished, utcnow
from shared.models.evals import EvalRun, EvalRunStatus
from shared.models.triggers import Trigger, TriggerStatus
from tests.support.loopback import free_port

RAAS = [sys.executable, "-m", "orchestrator.cli"]
ROOT_DIR = Path(__file__).resolve().parents[2]


def wait_http(url: str, timeout_s: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            msg = f"process for {url} exited with {proc.returncode}"
            raise RuntimeError(msg)
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    msg = f"{url} did not answer within {timeout_s}s"
    raise TimeoutError(msg)


@dataclass
class Stack:
    """A coordinator, N workers and a scripted model, as separate processes."""

    log_dir: Path
    script: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    model_port: int = field(default_factory=free_port)
    coordinator_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "RAAS_COORDINATOR_URL": f"http://127.0.0.1:{self.coordinator_port}",
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.model_port}",
            "PYTHONUNBUFFERED": "1",
            # A coordinator killed by a test leaves the reconcile lease to expire: seconds, not 10.
            "RAAS_LEASE_S": "2",
            **self.env,
        }

    def route_openai(self, key: str) -> None:
        """Send OpenAI's API (Codex's Responses calls) to the scripted model too, under ``key``,
        for the processes spawned from now on. The key stays in the worker's gateway."""
        self.env["OPENAI_API_KEY"] = key
        self.env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{self.model_port}/v1"

    def spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [*RAAS, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = proc
        return proc

    def start(self, workers: int = 1, concurrency: int | None = 1, pool: str | None = None) -> Stack:
        """Scripted model, coordinator, then ``workers`` workers (``concurrency``, ``pool``
        None: ``raas worker``'s default), once the projects earlier tests left are stopped."""
        stop_leftovers(self.env["RAAS_DATABASE_URL"])
        model = self.spawn(
            "scripted-model", ["scripted-model", "--script", str(self.script), "--port", str(self.model_port)]
        )
        wait_http(f"http://127.0.0.1:{self.model_port}/_scripted/health", proc=model)
        # A stack is a cluster of its own: its key (or none) is the one its replicas must have,
        # whatever an earlier test's stack on the same database had.
        coord = self.spawn(
            "coordinator", ["coordinator", "--adopt-secret-key", "--port", str(self.coordinator_port)]
        )
        wait_http(f"http://127.0.0.1:{self.coordinator_port}/healthz", proc=coord)
        for index in range(workers):
            self.spawn_worker(index, concurrency, pool)
        return self

    def spawn_worker(
        self, index: int, concurrency: int | None = 1, pool: str | None = None
    ) -> subprocess.Popen[bytes]:
        """``raas worker`` named ``w{index}@HOST``, as the process ``worker{index}``."""
        slots = [] if concurrency is None else ["--concurrency", str(concurrency)]
        slots += [] if pool is None else ["--pool", pool]
        return self.spawn(f"worker{index}", ["worker", *slots, "--name", f"w{index}@%h"])

    def cli(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*RAAS, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def model_requests(self) -> list[dict[str, Any]]:
        response = httpx.get(f"http://127.0.0.1:{self.model_port}/_scripted/requests", timeout=10)
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()
        return data

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.log_dir.glob("*.log")
        )


# What an earlier test may leave able to run: queued iterations, a breaker's trial, an approval's
# default action, a followed pull request's round.
LEFTOVER = (
    ProjectStatus.RUNNING,
    ProjectStatus.PAUSED,
    ProjectStatus.WAITING_FOR_APPROVAL,
    ProjectStatus.DELIVERED,
)


def stop_leftovers(database_url: str) -> None:
    """Stop every project earlier tests left on this database and end their unfinished iterations;
    pause their eval runs and triggers (which would start more projects).

    A test session's tests share a database and a broker. A project a test left running (it
    asserted what it needed and ended) keeps queued iterations, which the next stack's coordinator
    resends when it takes the reconcile lease and whose workers then run: they took three of the
    32 slots of test_threads_worker's barrier, which then never filled.
    """
    now = utcnow()
    left = Project.status.in_(LEFTOVER)
    with session_scope(database_url) as session:
        session.execute(
            update(Iteration)
            .where(unfinished(), Iteration.project_id.in_(select(Project.id).where(left)))
            .values(
                status=IterationStatus.FAILED,
                error="stopped: the test that started it ended",
                finished_at=now,
                advanced=True,
            )
        )
        session.execute(update(Project).where(left).values(status=ProjectStatus.STOPPED, finished_at=now))
        session.execute(
            update(EvalRun)
            .where(EvalRun.status == EvalRunStatus.RUNNING)
            .values(status=EvalRunStatus.PAUSED, status_reason="the test that started it ended")
        )
        session.execute(
            update(Trigger).where(Trigger.status == TriggerStatus.ACTIVE).values(status=TriggerStatus.PAUSED)
        )


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_example_demo(example: str, tmp_path: Path) -> str:
    """``bash scripts/demo.sh EXAMPLE`` as a user without an API key runs it (the scripted model),
    its files under ``tmp_path``; its output, once it has exited 0."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "RAAS_DATA_DIR")
    }
    environment["RAAS_DEMO_DIR"] = str(tmp_path / "demo")
    done = subprocess.run(
        ["bash", str(ROOT_DIR / "scripts/demo.sh"), example],
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output
