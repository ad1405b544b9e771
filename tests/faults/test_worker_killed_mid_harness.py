"""A worker killed with SIGKILL while a harness (Claude Code, Codex or OpenCode) runs a command in
the iteration's container: the container goes (swept as the dead worker's), the iteration is
re-run as attempt 2 by the other worker through its own gateway lease, and the project completes
with no call recorded or charged twice (issue #12 Tests, for each of the three harnesses)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Event, Iteration
from tests.support.faults import USAGE, Rig, containers_of, verify, wait_until
from tests.support.harness_calls import HARNESS_CALLS, HarnessCalls

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

# Not `sleep 30; ...`: Claude Code refuses a sleep followed by a command, at once.
SLOW = "python3 -c 'import time; time.sleep(30)' && cat notes/1.md"
# The note the re-run attempt writes: the killed attempt's work is never committed.
NOTE = ("notes/2.md", "note 2\n")
RAAS_TOML = """name = "harness-fault"
harness = "{harness}"
max_iterations = 5

[budget]
limit_usd = 5

[sandbox]
memory = "1g"
"""
# Stays in the worker: the gateway sends it to the scripted model, never into the container.
OPENAI_KEY = "sk-fault-test-openai-key"


def _script(harness: HarnessCalls) -> dict[str, Any]:
    """Attempt 1 writes a note and runs a long command (the kill lands in it); the re-run
    attempt takes the script's next steps: it writes the completion file, then ends."""
    steps: list[list[dict[str, Any]]] = [
        [{"type": "text", "text": "Writing the note."}, harness.write("notes/1.md", "note 1\n")],
        [harness.run(SLOW)],
        [harness.write(*NOTE), harness.write(".raas/complete", "notes written\n")],
        [{"type": "text", "text": "The notes are written."}],
    ]
    return {
        "responses": [{"content": content, "usage": USAGE} for content in steps],
        "when_exhausted": "repeat_last",
    }


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(HARNESS_CALLS))
def test_worker_killed_mid_harness_run_leaves_no_container_and_charges_nothing_twice(
    make_rig: Callable[..., Rig], database_url: str, name: str
) -> None:
    # Given two workers and a project on the harness, followed live
    harness = HARNESS_CALLS[name]
    # (RECOVERY_ENV sweeps every 2 s: the killed attempt's container goes soon after it is stale.)
    rig = make_rig(_script(harness), database_url=database_url, workers=0)
    rig.stack.route_openai(OPENAI_KEY)  # Codex's Responses API calls
    for index in range(2):
        rig.stack.spawn_worker(index, concurrency=1, pool="threads")
    project_dir = rig.work_dir / "project"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Write notes under notes/, then say you are done.\n")
    (project_dir / "raas.toml").write_text(RAAS_TOML.format(harness=name))
    submitted_at = time.monotonic()
    submitted = rig.stack.cli("submit", str(project_dir), "--json")
    assert submitted.returncode == 0, submitted.stderr + rig.explain()
    project_id: str = json.loads(submitted.stdout)["id"]
    rig.projects.append(project_id)
    follower = rig.follow(project_id)

    # When the worker running it is killed while the harness's command runs in the container
    running = _wait_for_command(rig, project_id)
    rig.kill(rig.worker_process(running), signal.SIGKILL)
    assert containers_of(project_id), "the killed attempt's container outlives it until the sweep"
    with session_scope(rig.database_url) as session:
        ran = session.scalars(
            select(Event.data).where(Event.iteration_id == running.id, Event.type == "tool_executed")
        ).all()
    assert [d["tool"] for d in ran] == [harness.wrote], "the kill landed while the command ran"

    # Then the project completes; every event, message and cost checks out, no container is left
    try:
        verdict = verify(rig, project_id, follower, submitted_at, cut_replies=1, workspace=_check_note)
    except AssertionError as failed:
        steps = [r["step"] for r in rig.stack.model_requests()]
        with session_scope(rig.database_url) as session:
            query = select(Event).where(Event.project_id == project_id).order_by(Event.seq)
            seen = [(e.seq, e.type, str(e.data)[:300]) for e in session.scalars(query)]
        msg = f"the script steps answered: {steps}; the events: {seen}"
        raise AssertionError(msg) from failed
    with session_scope(rig.database_url) as session:
        rerun = session.get_one(Iteration, running.id)
    # And the iteration was re-run once, as attempt 2, by the other worker
    assert rerun.attempt == 2, rerun
    assert rerun.worker != running.worker
    print(
        "\n"
        + verdict.summary(
            f"SIGKILL to worker {running.worker} while {name}'s shell ran a 30 s command in "
            "iteration 1's container; "
            f"{rerun.worker} re-ran it as attempt 2 through its own gateway lease."
        )
    )


def _wait_for_command(rig: Rig, project_id: str, timeout_s: float = 90) -> Iteration:
    """Iteration 1 once the slow command runs in its container. Not the harness's tool-call
    event: OpenCode prints a tool call only once it has finished."""

    def running() -> Iteration | None:
        for container in containers_of(project_id):
            top = subprocess.run(
                ["docker", "top", container, "-eo", "pid,args"], capture_output=True, text=True, check=False
            )
            if "time.sleep(30)" in top.stdout:
                with session_scope(rig.database_url) as session:
                    return session.scalar(
                        select(Iteration).where(Iteration.project_id == project_id, Iteration.number == 1)
                    )
        return None

    found: Iteration = wait_until(running, timeout_s, "the slow command to run in the container", 0.2)
    return found


def _check_note(rig: Rig, project_id: str) -> int:
    """The note the re-run attempt writes, looked up in the workspace: verify reads notes out of
    stored write calls, whose shapes are Claude Code's or ours (Codex's apply_patch is patch text,
    OpenCode's write takes filePath)."""
    path, content = NOTE
    bare = Path(rig.stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    shown = subprocess.run(
        ["git", "-C", str(bare), "show", f"main:{path}"], capture_output=True, text=True, check=False
    )
    assert shown.stdout == content, f"{path} is not in the workspace as written: {shown.stderr}"
    return 1
