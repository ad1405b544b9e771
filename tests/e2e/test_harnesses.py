"""examples/claude-code end to end through every layer, as separate processes: submitted with
the CLI, run by a worker whose Claude Code reaches the scripted model only through the worker's
LLM gateway, followed live, and the transcript and costs read back (issue #12 Tests)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Iteration, Message, Project
from tests.support.stack import ROOT_DIR, Stack, parse_json_lines

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
REAL_KEY = "sk-ant-e2e-real-key-that-stays-in-the-worker-77"


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    running = Stack(
        log_dir=tmp_path / "logs",
        script=ROOT_DIR / "examples/scripts/claude-code.json",
        env={"ANTHROPIC_API_KEY": REAL_KEY},
    ).start()
    yield running
    running.stop()


def test_claude_code_example_runs_through_every_layer_behind_the_gateway(stack: Stack) -> None:
    # Given a coordinator, a worker and the scripted model as separate processes
    # When examples/claude-code is submitted through the CLI and followed
    submitted = stack.cli("submit", str(ROOT_DIR / "examples/claude-code"), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id = json.loads(submitted.stdout)["id"]
    followed = stack.cli("follow", project_id, "--json", timeout_s=240)
    assert followed.returncode == 0, followed.stdout + followed.stderr + stack.logs()

    # Then the follower saw Claude Code's work as the project's own events, gapless, to completion
    seen = parse_json_lines(followed.stdout)
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1]["type"] == "project_completed"
    calls = [e["data"]["tool"] for e in seen if e["type"] == "agent_tool_call"]
    assert calls == ["write", "bash", "write"]
    ran = [e["data"] for e in seen if e["type"] == "tool_executed" and e["data"]["tool"] == "bash"]
    assert ran[0]["output"] == "Hello, Constellation!"

    # And the workspace holds the program and not the completion file
    bare = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    show = subprocess.run(["git", "-C", str(bare), "show", "main:hello.py"], capture_output=True, text=True)
    assert show.stdout == 'print("Hello, Constellation!")\n'
    tree = subprocess.run(
        ["git", "-C", str(bare), "ls-tree", "-r", "--name-only", "main"], capture_output=True, text=True
    )
    assert ".raas/complete" not in tree.stdout

    # And the gateway recorded each of the four calls with the script's usage, priced by our table
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        replies = list(
            session.scalars(
                select(Message)
                .where(Message.project_id == project_id, Message.role == "assistant")
                .order_by(Message.seq)
            )
        )
        iteration = session.scalars(select(Iteration).where(Iteration.project_id == project_id)).one()
    assert [m.input_tokens for m in replies] == [1200, 1300, 1400, 1500]
    assert project.spent_usd == sum(m.cost_usd for m in replies)
    assert iteration.completed_task
    assert iteration.summary == "hello.py prints Hello, Constellation!"

    # And the transcript shows the calls; the real key is in none of it, nor in the events
    transcript = stack.cli("transcript", project_id, "--format", "json")
    assert transcript.returncode == 0, transcript.stderr
    assert "Hello, Constellation!" in transcript.stdout
    assert REAL_KEY not in transcript.stdout + followed.stdout
    # (four calls; the provider's free count of a request, asked near a budget's end, is not one)
    logged = [(r["path"], r["turn"]) for r in stack.model_requests()]
    assert [turn for path, turn in logged if path == "/v1/messages"] == [0, 1, 2, 3], logged
