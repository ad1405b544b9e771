"""Horizontal scaling: two worker processes with different node names on one broker share a
project's subagents; one is killed in the middle of an iteration and nothing is lost. And
`raas workers` shows the live workers, their queues and the iterations they run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select

from shared import events
from shared.db import session_scope
from shared.models import (
    Agent,
    AgentStatus,
    Iteration,
    IterationStatus,
    LedgerEntry,
    Message,
    Project,
    ProjectStatus,
)
from tests.support.stack import Stack
from workers.sandbox.sweeper import cluster_id

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

T = TypeVar("T")
SUBAGENTS = 4
SPAWN = {
    "content": [
        {
            "type": "tool_use",
            "name": "spawn_subagent",
            "input": {"category": "searcher", "prompt": f"survey part {i}"},
        }
        for i in range(SUBAGENTS)
    ]
}
# Every later call (each subagent's one call, then the root's last) takes ten seconds, so an
# iteration is surely running when a worker is killed, or while `raas workers` is asked twice
# on a loaded machine (at 4 s the text listing once came after both iterations had ended).
SLOW_REPORT = {
    "content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "REPORT: surveyed"}}],
    "latency_s": 10,
}
SCRIPT = {
    "responses": [SPAWN, {"content": [{"type": "text", "text": "Spawned; ending my turn."}]}, SLOW_REPORT],
    "when_exhausted": "repeat_last",
}
# A dead worker is noticed within seconds instead of the production half-minute.
QUICK_RECOVERY = {
    "RAAS_HEARTBEAT_INTERVAL_S": "1",
    "RAAS_HEARTBEAT_STALE_S": "5",
    "RAAS_RECONCILE_INTERVAL_S": "2",
}


def _docker_ids(label: str) -> list[str]:
    found = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True, check=True
    )
    return found.stdout.split()


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    running = Stack(log_dir=tmp_path / "logs", script=script, env=dict(QUICK_RECOVERY))
    running.start(workers=2, concurrency=1)
    yield running
    running.stop()
    # Whatever a failed test left behind: every sandbox of this test session's cluster.
    leftovers = _docker_ids(f"raas.cluster={cluster_id(os.environ['RAAS_DATABASE_URL'])}")
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


def _submit(stack: Stack, tmp_path: Path) -> str:
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Survey the code base with four searchers, then finish.\n")
    (project_dir / "raas.toml").write_text(f"max_parallel = {SUBAGENTS}\n")
    submitted = stack.cli("submit", str(project_dir), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id: str = json.loads(submitted.stdout)["id"]
    return project_id


def _wait_for(what: str, probe: Callable[[], T | None], stack: Stack, timeout_s: float = 120) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout_s}s\n{stack.logs()}")


def _iterations(project_id: str) -> list[Iteration]:
    with session_scope() as session:
        return list(session.scalars(select(Iteration).where(Iteration.project_id == project_id)))


def _on_both_workers(project_id: str) -> str | None:
    """An iteration running on w1 while w0 has run or runs another one (its id), else None."""
    rows = _iterations(project_id)
    if not any((it.worker or "").startswith("w0@") for it in rows):
        return None
    running = [
        it for it in rows if it.status == IterationStatus.RUNNING and (it.worker or "").startswith("w1@")
    ]
    return running[0].id if running else None


def _ended(project_id: str) -> Project | None:
    with session_scope() as session:
        project = session.get_one(Project, project_id)
    return project if project.status.is_terminal else None


def test_two_workers_share_a_projects_subagents_and_a_killed_one_loses_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    # Given two workers, w0 and w1, on one broker, and a project whose root spawns 4 subagents
    project_id = _submit(stack, tmp_path)

    # When both run its iterations, and w1 is killed (SIGKILL) in the middle of one
    victim = _wait_for("an iteration on w1 while w0 works too", lambda: _on_both_workers(project_id), stack)
    time.sleep(1.0)  # into the model call of the iteration
    os.killpg(stack.procs["worker1"].pid, signal.SIGKILL)
    stack.procs["worker1"].wait(timeout=10)

    # Then the project still completes
    project = _wait_for("the project's end", lambda: _ended(project_id), stack, timeout_s=180)
    assert project.status == ProjectStatus.COMPLETED, (project.status_reason, stack.logs())

    # And both workers ran its iterations, by their own node names
    with session_scope() as session:
        started = [
            e.data["worker"]
            for e in events.history(session, project_id, limit=10_000)
            if e.type == events.ITERATION_STARTED
        ]
    assert {w.split("@")[0] for w in started} == {"w0", "w1"}

    # And the killed iteration was run again, as a new attempt, on the surviving worker
    by_id = {it.id: it for it in _iterations(project_id)}
    assert by_id[victim].status == IterationStatus.SUCCEEDED
    assert by_id[victim].attempt == 2
    assert (by_id[victim].worker or "").startswith("w0@")
    assert all(it.status == IterationStatus.SUCCEEDED for it in by_id.values())

    # And every subagent handed in its report
    with session_scope() as session:
        subagents = list(
            session.scalars(select(Agent).where(Agent.project_id == project_id, Agent.depth == 1))
        )
    assert len(subagents) == SUBAGENTS
    assert all(a.status == AgentStatus.COMPLETED and "REPORT" in (a.report or "") for a in subagents)

    # And nothing was recorded or charged twice: one answer per call of each final attempt, and
    # the project's spend is exactly the sum of its messages' costs and of its settlements
    with session_scope() as session:
        calls = session.execute(
            select(Message.iteration_id, Message.attempt, func.count())
            .where(Message.project_id == project_id, Message.role == "assistant")
            .group_by(Message.iteration_id, Message.attempt)
        ).all()
        message_total = session.scalar(
            select(func.sum(Message.cost_usd)).where(Message.project_id == project_id)
        )
        settled = session.scalar(
            select(func.sum(LedgerEntry.amount_usd)).where(
                LedgerEntry.project_id == project_id, LedgerEntry.kind == "settle"
            )
        )
    final = {(it.id, it.attempt) for it in by_id.values()}
    per_final_attempt = sorted(n for iteration, attempt, n in calls if (iteration, attempt) in final)
    # the root's first iteration made two calls (spawn, then end its turn); every other one, one
    assert per_final_attempt == [1] * (len(final) - 1) + [2]
    assert project.spent_usd == message_total == settled
    assert project.reserved_usd == 0

    # And no container is left: the dead worker's sandbox is swept by the surviving worker
    _wait_for(
        "the project's sandboxes removed",
        lambda: _docker_ids(f"raas.project={project_id}") == [] or None,
        stack,
        timeout_s=90,
    )


def _workers(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    listed = stack.cli("workers", *args)
    assert listed.returncode == 0, listed.stderr + stack.logs()
    return listed


def _running_subagent(project_id: str) -> bool | None:
    rows = _iterations(project_id)
    return True if sum(it.status == IterationStatus.RUNNING for it in rows) >= 2 else None


def test_workers_command_lists_live_workers_their_queues_and_iterations(stack: Stack, tmp_path: Path) -> None:
    # Given two workers running a project's subagents
    project_id = _submit(stack, tmp_path)
    _wait_for("two iterations running", lambda: _running_subagent(project_id), stack)

    # When an operator lists the workers
    nodes: list[dict[str, Any]] = json.loads(_workers(stack, "--json").stdout)

    # Then both workers are there, on the iterations queue and their own (a task's next iteration
    # goes first to the worker holding its container), each running one of its iterations
    by_name = {node["name"].split("@")[0]: node for node in nodes}
    assert {"w0", "w1", "coordinator"} <= set(by_name), nodes
    for name in ("w0", "w1"):
        assert by_name[name]["queues"] == ["iterations", f"worker.{by_name[name]['name']}"]
        assert by_name[name]["concurrency"] == 1
    assert by_name["coordinator"]["queues"] == ["coordinator"]
    running = [task for name in ("w0", "w1") for task in by_name[name]["active"]]
    assert len(running) == 2, nodes
    for task in running:
        assert task["name"] == "raas.run_iteration"
        assert task["project_id"] == project_id
        assert task["attempt"] == 1
        assert task["category"] == "searcher"
        assert task["started_at"]

    # And the text form names them with what they run
    text = _workers(stack).stdout
    assert "w0@" in text
    assert "w1@" in text
    assert f"project {project_id}" in text
    stack.cli("stop", project_id)
