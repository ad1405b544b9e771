"""Flower: started against the test broker beside a coordinator and a worker, it shows every task
of a project with its name and the project's id, through its REST API behind basic auth.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.celery_app import ADVANCE_PROJECT, RUN_ITERATION
from tests.support.loopback import free_port
from tests.support.stack import ROOT_DIR, Stack, parse_json_lines, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

AUTH = ("operator", "flower-test-password")


class Flower:
    def __init__(self, stack: Stack) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        with (stack.log_dir / "flower.log").open("ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "--app",
                    "shared.celery_app:app",
                    "flower",
                    f"--port={port}",
                    "--address=127.0.0.1",
                    f"--basic_auth={AUTH[0]}:{AUTH[1]}",
                ],
                env=stack.env,
                cwd=ROOT_DIR,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.procs["flower"] = proc  # stopped with the stack
        wait_http(f"{self.url}/healthcheck", proc=proc)

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, auth=AUTH, timeout=10)
        response.raise_for_status()
        return response.json()

    def wait_for_worker(self, prefix: str, timeout_s: float = 60) -> None:
        """Until Flower has received the worker's events (so it is listening to the event stream)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(w.get("hostname", "").startswith(prefix) for w in self.get("/workers", json=1)["data"]):
                return
            time.sleep(0.5)
        msg = f"Flower saw no event from {prefix}* within {timeout_s}s"
        raise TimeoutError(msg)


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    running = Stack(log_dir=tmp_path / "logs", script=ROOT_DIR / "examples/scripts/hello.json").start()
    yield running
    running.stop()


def _kwargs(task: dict[str, Any]) -> dict[str, Any]:
    """Flower shows a task's kwargs as their repr."""
    parsed = ast.literal_eval(task.get("kwargs") or "{}")
    return parsed if isinstance(parsed, dict) else {}


def _tasks_of(flower: Flower, project_id: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    """The project's tasks once Flower has seen both kinds finish."""
    deadline = time.monotonic() + timeout_s
    while True:
        tasks = list(flower.get("/api/tasks").values())
        ours = [t for t in tasks if _kwargs(t).get("project_id") == project_id]
        done = {t["name"] for t in ours if t.get("state") == "SUCCESS"}
        if {RUN_ITERATION, ADVANCE_PROJECT} <= done or time.monotonic() > deadline:
            return tasks
        time.sleep(0.5)


def test_flower_shows_every_task_with_its_name_and_project(stack: Stack) -> None:
    # Given Flower, behind basic auth, listening to the broker's events
    flower = Flower(stack)
    flower.wait_for_worker("w0@")
    assert httpx.get(f"{flower.url}/api/tasks", timeout=10).status_code == 401
    assert httpx.get(f"{flower.url}/metrics", timeout=10).status_code == 200

    # When a project runs to its end
    submitted = stack.cli("submit", str(ROOT_DIR / "examples/hello"), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id = parse_json_lines(submitted.stdout.replace("\n", " ") + "\n")[0]["id"]
    followed = stack.cli("follow", project_id, timeout_s=240)
    assert followed.returncode == 0, followed.stdout + followed.stderr + stack.logs()

    # Then Flower's API lists its tasks: the worker's iteration and the coordinator's advance,
    # each with its name, the project's id in its arguments, and where it ran
    tasks = _tasks_of(flower, project_id)
    ours = [t for t in tasks if _kwargs(t).get("project_id") == project_id]
    names = sorted(t["name"] for t in ours)
    assert names.count(RUN_ITERATION) == 1, tasks
    assert names.count(ADVANCE_PROJECT) >= 1, tasks
    for task in ours:
        assert task["state"] == "SUCCESS", task
        assert _kwargs(task)["iteration_id"], task
        expected_node = "w0@" if task["name"] == RUN_ITERATION else "coordinator@"
        assert (task.get("worker") or "").startswith(expected_node), task
    # and no task it shows lacks a name or a project
    assert all(t.get("name") and _kwargs(t).get("project_id") for t in tasks), tasks
