"""A worker killed with SIGKILL while Claude Code runs a command in the iteration's container:
the container goes (swept as the dead worker's), the iteration is re-run as attempt 2 by the
other worker through its own gateway lease, and the project completes with no call recorded or
charged twice (issue #12 Tests)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Event, Iteration
from tests.support.faults import USAGE, Rig, containers_of, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

SLOW = "python3 -c 'import time; time.sleep(30)' && cat notes/1.md"
RAAS_TOML = """name = "harness-fault"
harness = "claude-code"
max_iterations = 5

[budget]
limit_usd = 5

[sandbox]
memory = "1g"
"""


def _write(path: str, content: str) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "name": "Write",
        "input": {"file_path": f"/workspace/{path}", "content": content},
    }


def _script() -> dict[str, Any]:
    """Attempt 1 writes a note and runs a long command (the kill lands in it); the re-run
    attempt takes the script's next steps: it writes the completion file, then ends."""
    steps: list[list[dict[str, Any]]] = [
        [{"type": "text", "text": "Writing the note."}, _write("notes/1.md", "note 1\n")],
        # Not `sleep 30; ...`: Claude Code refuses a sleep followed by a command, at once.
        [{"type": "tool_use", "name": "Bash", "input": {"command": SLOW}}],
        [_write("notes/2.md", "note 2\n"), _write(".raas/complete", "notes written\n")],
        [{"type": "text", "text": "The notes are written."}],
    ]
    return {
        "responses": [{"content": content, "usage": USAGE} for content in steps],
        "when_exhausted": "repeat_last",
    }


@pytest.mark.timeout(240)
def test_worker_killed_mid_harness_run_leaves_no_container_and_charges_nothing_twice(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given two workers and a Claude Code project, followed live
    # The sweep every 2 s, not 30: the killed attempt's container goes soon after it is stale.
    rig = make_rig(
        _script(),
        database_url=database_url,
        workers=2,
        pool="threads",
        env={"RAAS_SANDBOX_SWEEP_INTERVAL_S": "2"},
    )
    project_dir = rig.work_dir / "project"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Write notes under notes/, then say you are done.\n")
    (project_dir / "raas.toml").write_text(RAAS_TOML)
    submitted_at = time.monotonic()
    submitted = rig.stack.cli("submit", str(project_dir), "--json")
    assert submitted.returncode == 0, submitted.stderr + rig.explain()
    project_id: str = json.loads(submitted.stdout)["id"]
    rig.projects.append(project_id)
    follower = rig.follow(project_id)

    # When the worker running it is killed while Claude Code's Bash command runs in the container
    running = rig.wait_for_tool(project_id, number=1, tool="bash")
    rig.kill(rig.worker_process(running), signal.SIGKILL)
    assert containers_of(project_id), "the killed attempt's container outlives it until the sweep"
    with session_scope(rig.database_url) as session:
        ran = session.scalars(
            select(Event.data).where(Event.iteration_id == running.id, Event.type == "tool_executed")
        ).all()
    assert [d["tool"] for d in ran] == ["write"], "the kill landed while the command ran"

    # Then the project completes; every event, message and cost checks out, no container is left
    try:
        verdict = verify(rig, project_id, follower, submitted_at, cut_replies=1)
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
            f"SIGKILL to worker {running.worker} while Claude Code's Bash ran a 30 s command in "
            "iteration 1's container; "
            f"{rerun.worker} re-ran it as attempt 2 through its own gateway lease."
        )
    )
