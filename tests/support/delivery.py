"""Delivery end to end, as the e2e and fault tests of issue #14 set it up: the tests' git server and
fake forge on loopback, a stack of real processes (coordinator, worker, scripted model) whose
tenant credential is stored with ``raas credentials set``, and a project submitted with
``raas submit --repo URL --ref main``.

    with delivery_world(tmp_path) as world:
        stack = world.stack(script)
        project_id = world.submit(stack, toml + world.delivery_toml("ready"))
        wait_delivered(project_id, {"project"}, stack)

Every wait is bounded and says what it waited for: a delivery never consumed (nothing reads the
``coordinator`` queue) or a push waiting on a prompt fails in a minute showing the delivery rows
and the processes' logs.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Delivery, DeliveryStatus, Event, Project, ProjectStatus
from tests.support.faults import wait_until
from tests.support.forge import FakeForge, serve_forge
from tests.support.git_server import GitServer, serve_git
from tests.support.stack import Stack, wait_http

REPO = "alice/app"  # owner/name, as the forge knows it
DELIVERED_WITHIN_S = 60.0


def write_step(path: str, content: str, usage: dict[str, int]) -> dict[str, Any]:
    """A scripted answer writing one file."""
    call = {"type": "tool_use", "name": "write", "input": {"path": path, "content": content}}
    return {"content": [call], "usage": usage}


def done_step(summary: str, usage: dict[str, int]) -> dict[str, Any]:
    """A scripted answer ending the task with ``summary``."""
    call = {"type": "tool_use", "name": "task_complete", "input": {"summary": summary}}
    return {"content": [call], "usage": usage}


@dataclass
class World:
    server: GitServer
    forge: FakeForge
    url: str
    tmp: Path
    stacks: list[Stack] = field(default_factory=list)

    def delivery_toml(self, pull_request: str) -> str:
        return (
            f'[delivery]\npull_request = "{pull_request}"\nforge = "github"\napi_url = "{self.forge.url}"\n'
        )

    def stack(self, script: dict[str, Any], env: dict[str, str] | None = None) -> Stack:
        """A scripted model, a coordinator and a worker, with an operator key for credentials."""
        path = self.tmp / "script.json"
        path.write_text(json.dumps(script))
        env = {"RAAS_SECRET_KEY": Fernet.generate_key().decode(), **(env or {})}
        stack = Stack(log_dir=self.tmp / "logs", script=path, env=env)
        self.stacks.append(stack)
        return stack.start()

    def submit(self, stack: Stack, toml: str) -> str:
        """``raas credentials set`` for the server's host, then ``raas submit --repo --ref main``."""
        host = self.server.base_url.removeprefix("http://")
        token_file = self.tmp / "token"
        token_file.write_text(self.server.password + "\n")
        stored = stack.cli(
            "credentials", "set", host, "--username", self.server.username, "--token-file", str(token_file)
        )
        assert stored.returncode == 0, stored.stderr
        config = self.tmp / "cfg"
        config.mkdir(exist_ok=True)
        (config / "raas.toml").write_text(toml)
        prompt = self.tmp / "PROMPT.md"
        prompt.write_text("Do the tasks.\n")
        submitted = stack.cli(
            "submit", str(config), "--repo", self.url, "--ref", "main", "--prompt-file", str(prompt)
        )
        assert submitted.returncode == 0, submitted.stderr
        return submitted.stdout.strip()

    def pushes(self) -> int:
        """Pushes the git server has taken (each an answered git-receive-pack POST)."""
        return sum(
            1
            for r in self.server.requests
            if r.method == "POST" and r.path.endswith("git-receive-pack") and r.status == 200
        )


@contextmanager
def delivery_world(tmp_path: Path) -> Iterator[World]:
    """The git server (``alice/app`` with a README on main) and the forge; stacks stopped at the end."""
    with serve_git(tmp_path / "served") as server, serve_forge(token=server.password) as forge:
        url = server.create_repo(REPO, {"README.md": "hello\n"})
        world = World(server, forge, url, tmp_path)
        try:
            yield world
        finally:
            for stack in world.stacks:
                stack.stop()


def workspace(stack: Stack, project_id: str) -> Path:
    """The project's bare repository on the coordinator."""
    return Path(stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"


def kill_coordinator(stack: Stack) -> None:
    """SIGKILL the coordinator process (API, consumer, reconcile loop) and its children."""
    proc = stack.procs["coordinator"]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def start_coordinator(stack: Stack) -> None:
    proc = stack.spawn("coordinator", ["coordinator", "--port", str(stack.coordinator_port)])
    wait_http(f"http://127.0.0.1:{stack.coordinator_port}/healthz", proc=proc)


def project_row(project_id: str) -> Project:
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        session.expunge(project)
    return project


def ended(project_id: str) -> ProjectStatus | None:
    status = project_row(project_id).status
    return status if status.is_terminal else None


def deliveries(project_id: str) -> dict[str, Delivery]:
    """The project's delivery rows by key (``task:KEY`` or ``project``)."""
    with session_scope() as session:
        rows = session.scalars(select(Delivery).where(Delivery.project_id == project_id)).all()
        session.expunge_all()
    return {row.key: row for row in rows}


def events_of(project_id: str, *types: str) -> list[dict[str, Any]]:
    with session_scope() as session:
        rows = session.execute(
            select(Event.type, Event.data)
            .where(Event.project_id == project_id, Event.type.in_(types))
            .order_by(Event.seq)
        ).all()
    return [{"type": t, **d} for t, d in rows]


def wait_delivered(
    project_id: str, keys: set[str], stack: Stack, round_: int = 1, timeout_s: float = DELIVERED_WITHIN_S
) -> dict[str, Delivery]:
    """Every delivery in ``keys`` delivered at ``round_`` or later; an AssertionError showing the
    rows and the processes' logs as soon as one fails, or on timeout."""

    def done() -> dict[str, Delivery] | None:
        rows = deliveries(project_id)
        failed = {k: r.error for k, r in rows.items() if k in keys and r.status == DeliveryStatus.FAILED}
        if failed:
            msg = f"deliveries failed: {failed}\n{stack.logs()}"
            raise AssertionError(msg)
        finished = all(
            k in rows and rows[k].status == DeliveryStatus.DELIVERED and rows[k].round >= round_ for k in keys
        )
        return rows if finished else None

    try:
        result: dict[str, Delivery] = wait_until(done, timeout_s, f"deliveries {sorted(keys)}")
    except TimeoutError as exc:
        rows = {k: (r.status.value, r.round, r.error) for k, r in deliveries(project_id).items()}
        msg = f"{exc}; rows: {rows}\n{stack.logs()}"
        raise AssertionError(msg) from None
    return result
