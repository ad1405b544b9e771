"""Many iterations in one worker process (``raas worker --pool threads``): they run at once and
none sees another's workspace, container, events or usage; a warm shutdown lets them finish and
removes the warm pool; bad options are refused in one line.

A worker process killed with several iterations running is tests/faults/test_worker_killed.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import select

from orchestrator.cli.client import ApiClient
from shared.archive import pack_files
from shared.db import session_scope
from shared.models import Event, Iteration, IterationStatus, Message, Project, ProjectStatus
from tests.support.stack import RAAS, Stack
from workers.sandbox.sweeper import cluster_id

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

T = TypeVar("T")
USAGE = {"input_tokens": 1000, "output_tokens": 50}
# Every sandbox of this test session is labelled with its database.
CLUSTER = f"label=raas.cluster={cluster_id(os.environ['RAAS_DATABASE_URL'])}"
RAAS_TOML = (
    'model = "claude-sonnet-4-6"\nmax_iterations = 3\nmax_turns = 5\nmax_tokens = 1024\n'
    '[budget]\nlimit_usd = 5\n[sandbox]\nmemory = "128m"\n'
)


def one_iteration_script(sleep_s: float, latency_s: float, gather: int = 1) -> dict[str, Any]:
    """Each project's one iteration: a model call answered after ``latency_s``, a bash command
    that takes ``sleep_s``, copies the project's own token.txt and lists the workspace, and a
    model call that completes the task, answered after ``latency_s`` once ``gather`` iterations
    have asked for it and (``gather`` > 1) the test has released them (the scripted model's
    barrier and hold: until then every one of them is running, its container with it)."""
    work = {
        "content": [
            {"type": "text", "text": "Reading my token."},
            {"type": "tool_use", "name": "bash",
             "input": {"command": f"sleep {sleep_s}; cp token.txt seen.txt; cat token.txt; ls"}},
        ],
        "usage": USAGE,
        "latency_s": latency_s,
    }  # fmt: skip
    done = {
        "content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "token copied"}}],
        "usage": USAGE,
        "latency_s": latency_s,
        "gather": gather,
        "gather_timeout_s": 420,
        "hold": gather > 1,
    }
    return {"responses": [work, done], "when_exhausted": "repeat_last"}


def wait_for(what: str, probe: Callable[[], T | None], stack: Stack, timeout_s: float = 120) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout_s}s\n{stack.logs()}")


def cluster_containers(*labels: str) -> list[dict[str, str]]:
    """The labels of every container of this test session's cluster (and ``labels``)."""
    filters = [a for f in (CLUSTER, *labels) for a in ("--filter", f)]
    listed = subprocess.run(
        ["docker", "ps", "-a", *filters, "--format", "{{json .Labels}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        dict(pair.split("=", 1) for pair in json.loads(line).split(","))
        for line in listed.stdout.splitlines()
    ]


@pytest.fixture
def make_stack(services: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """A scripted model, a coordinator and one threads worker; stopped afterwards, and every
    container of this session's cluster removed."""
    stacks: list[Stack] = []

    def make(script: dict[str, Any], concurrency: int, env: dict[str, str] | None = None) -> Stack:
        path = tmp_path / f"script-{len(stacks)}.json"
        path.write_text(json.dumps(script))
        stack = Stack(log_dir=tmp_path / f"logs-{len(stacks)}", script=path, env=env or {})
        stacks.append(stack)
        return stack.start(workers=1, concurrency=concurrency, pool="threads")

    yield make
    for stack in stacks:
        stack.stop()
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", CLUSTER], capture_output=True, text=True, check=True
    ).stdout.split()
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True, check=False)


def start_projects(stack: Stack, tokens: list[str]) -> dict[str, str]:
    """Create one project per token (its workspace holds token.txt), then start them all at
    once; project id -> token."""
    api = ApiClient(stack.env["RAAS_COORDINATOR_URL"], stack.env["RAAS_API_TOKEN"], timeout_s=120)
    files = {"PROMPT.md": "Copy token.txt to seen.txt, then finish.\n", "raas.toml": RAAS_TOML}
    with ThreadPoolExecutor(4) as pool:
        archives = [pack_files({**files, "token.txt": token + "\n"}) for token in tokens]
        ids = [p["id"] for p in pool.map(api.create_project, archives, [f"p-{t}" for t in tokens])]
        list(pool.map(api.start_project, ids))
    api.close()
    return dict(zip(ids, tokens, strict=True))


def iterations_of(project_ids: list[str]) -> list[Iteration]:
    with session_scope() as session:
        return list(session.scalars(select(Iteration).where(Iteration.project_id.in_(project_ids))))


def bash_calls(project_ids: list[str]) -> int:
    with session_scope() as session:
        rows = session.scalars(
            select(Event.data).where(Event.project_id.in_(project_ids), Event.type == "agent_tool_call")
        ).all()
    return sum(1 for data in rows if data.get("tool") == "bash")


def all_ended(project_ids: list[str]) -> list[Project] | None:
    with session_scope() as session:
        projects = list(session.scalars(select(Project).where(Project.id.in_(project_ids))))
    return projects if all(p.status.is_terminal for p in projects) else None


def most_at_once(iterations: list[Iteration]) -> int:
    """The most iterations running at the same moment (from their rows' start and end)."""
    edges = sorted(
        [(it.started_at, 1) for it in iterations if it.started_at]
        + [(it.finished_at, -1) for it in iterations if it.finished_at]
    )
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def workspace_file(stack: Stack, project_id: str, path: str) -> str:
    bare = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    shown = subprocess.run(
        ["git", "-C", str(bare), "show", f"main:{path}"], capture_output=True, text=True, check=False
    )
    return shown.stdout


@pytest.mark.timeout(720)
def test_32_iterations_at_once_in_one_threads_worker_keep_to_their_own_workspace_container_events_and_usage(
    make_stack: Callable[..., Stack],
) -> None:
    # Given one threads worker of concurrency 32 and 32 projects, each with a token of its own,
    # whose one iteration runs bash for 2 s in its container, then waits for its second model
    # call until all 32 have asked for theirs
    stack = make_stack(one_iteration_script(sleep_s=2, latency_s=1, gather=32), concurrency=32)
    tokens = [f"token-{i:02d}-{os.urandom(4).hex()}" for i in range(32)]

    # When all 32 start at once
    projects = start_projects(stack, tokens)
    ids = list(projects)

    # Then at one moment there are 32 containers, one per iteration, each labelled with its
    # own iteration's project
    def all_containers() -> list[dict[str, str]] | None:
        # (this test's projects': a container another test of this database left is not one)
        labelled = [
            labels
            for labels in cluster_containers()
            if "raas.iteration" in labels and labels.get("raas.project") in projects
        ]
        return labelled if len(labelled) >= 32 else None

    seen = wait_for("32 containers at once", all_containers, stack, timeout_s=420)
    httpx.post(f"http://127.0.0.1:{stack.model_port}/_scripted/release", timeout=10).raise_for_status()
    running = {it.id: it for it in iterations_of(ids)}
    assert sorted(labels["raas.iteration"] for labels in seen) == sorted(running)
    assert all(running[labels["raas.iteration"]].project_id == labels["raas.project"] for labels in seen)

    # And every project completes in one iteration, all run by the one worker process, all at once
    ended = wait_for("every project to end", lambda: all_ended(ids), stack, timeout_s=180)
    assert {p.status for p in ended} == {ProjectStatus.COMPLETED}, [(p.id, p.status_line) for p in ended]
    done = iterations_of(ids)
    assert sorted(it.project_id for it in done) == sorted(ids)
    assert {(it.status, it.attempt) for it in done} == {(IterationStatus.SUCCEEDED, 1)}
    assert len({it.worker for it in done}) == 1, {it.worker for it in done}
    assert most_at_once(done) == 32
    worker = stack.procs["worker0"].pid
    assert not Path(f"/proc/{worker}/task/{worker}/children").read_text().split(), (
        "a threads worker forks none"
    )

    with session_scope() as session:
        events = session.execute(
            select(Event.project_id, Event.seq, Event.type, Event.iteration_id, Event.data).where(
                Event.project_id.in_(ids)
            )
        ).all()
        messages = session.execute(
            select(Message.project_id, Message.iteration_id, Message.role, Message.input_tokens,
                   Message.output_tokens, Message.cost_usd).where(Message.project_id.in_(ids))
        ).all()  # fmt: skip
        spent = {p.id: (p.spent_usd, p.reserved_usd, p.last_event_seq) for p in session.scalars(
            select(Project).where(Project.id.in_(ids)))}  # fmt: skip
    iteration_of = {it.id: it.project_id for it in done}
    for project_id, token in projects.items():
        others = [t for t in tokens if t != token]
        # And its workspace holds its own token, copied by its own container, and nothing of another's
        assert workspace_file(stack, project_id, "seen.txt") == token + "\n"
        # And its events are its own: seq 1..N, of its own iteration, its bash output its own
        mine = [e for e in events if e.project_id == project_id]
        assert sorted(e.seq for e in mine) == list(range(1, spent[project_id][2] + 1))
        assert {e.iteration_id for e in mine if e.iteration_id} == {
            i for i, p in iteration_of.items() if p == project_id
        }
        outputs = [e.data["output"] for e in mine if e.type == "tool_executed" and e.data["tool"] == "bash"]
        assert len(outputs) == 1, outputs
        lines = outputs[0].splitlines()
        assert lines[:2] == ["exit code 0", token], outputs[0]
        assert sorted(lines[2:]) == ["seen.txt", "token.txt"], outputs[0]
        assert not any(other in outputs[0] for other in others), outputs[0]
        # And its usage is its own two calls, charged once, nothing left reserved
        replies = [m for m in messages if m.project_id == project_id and m.role == "assistant"]
        assert [(m.input_tokens, m.output_tokens) for m in replies] == [(1000, 50)] * 2
        assert all(iteration_of[m.iteration_id] == project_id for m in replies)
        assert spent[project_id][0] == sum((m.cost_usd for m in replies), Decimal(0)) > 0
        assert spent[project_id][1] == 0
    assert len({value[0] for value in spent.values()}) == 1, "every project paid the same two calls"

    # And no container is left
    wait_for("no container left", lambda: not cluster_containers(), stack, timeout_s=30)


@pytest.mark.timeout(240)
def test_a_threads_worker_stopped_lets_its_running_iterations_finish_and_removes_its_warm_pool(
    make_stack: Callable[..., Stack],
) -> None:
    # Given one threads worker with a warm pool of 2, running three projects' iterations at once
    stack = make_stack(
        one_iteration_script(sleep_s=5, latency_s=0.5), concurrency=4, env={"RAAS_WARM_POOL_SIZE": "2"}
    )
    ids = list(start_projects(stack, ["one", "two", "three"]))
    wait_for("three bash calls", lambda: bash_calls(ids) >= 3, stack)
    assert cluster_containers("label=raas.pool"), "the warm pool refilled"

    # When it is stopped (SIGTERM: Celery's warm shutdown) while they run bash
    worker = stack.procs["worker0"]
    os.killpg(worker.pid, signal.SIGTERM)

    # Then it exits 0 once they have finished: each succeeded in its first attempt
    assert worker.wait(timeout=120) == 0, stack.logs()
    ended = wait_for("every project to end", lambda: all_ended(ids), stack, timeout_s=60)
    assert {p.status for p in ended} == {ProjectStatus.COMPLETED}, [(p.id, p.status_line) for p in ended]
    assert {(it.status, it.attempt) for it in iterations_of(ids)} == {(IterationStatus.SUCCEEDED, 1)}
    # And neither their sandboxes nor the warm pool's are left
    assert cluster_containers() == []


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--pool", "gevent"], {}, "--pool 'gevent' is not a pool; use threads or prefork"),
        (["--concurrency", "0"], {}, "--concurrency 0"),
        (
            ["--pool", "threads", "--concurrency", "16"],
            {"RAAS_DB_POOL_SIZE": "4", "RAAS_DB_MAX_OVERFLOW": "2"},
            "holds 6 connections (RAAS_DB_POOL_SIZE 4 + RAAS_DB_MAX_OVERFLOW 2), fewer than --concurrency 16",
        ),
    ],
)
def test_a_worker_that_cannot_run_as_asked_is_refused_in_one_line(
    args: list[str], env: dict[str, str], says: str
) -> None:
    # Nothing answers on the broker's port: the refusal comes before the worker would connect.
    result = subprocess.run(
        [*RAAS, "worker", *args],
        env={**os.environ, **env, "RAAS_BROKER_URL": "redis://127.0.0.1:1/0"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert says in lines[0], lines[0]
