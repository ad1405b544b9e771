"""The foundation, end to end: examples/hello submitted through the CLI to a coordinator and a
worker running as separate processes, the real anthropic SDK talking to the scripted model.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Iteration, Message, Project
from tests.support.faults import containers_of
from tests.support.stack import ROOT_DIR, Stack, parse_json_lines

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    running = Stack(log_dir=tmp_path / "logs", script=ROOT_DIR / "examples/scripts/hello.json").start()
    yield running
    running.stop()


def test_hello_project_runs_to_completion_through_every_layer(stack: Stack) -> None:
    # Given a coordinator, a worker and the scripted model running as separate processes
    # When examples/hello is submitted through the CLI and followed
    submitted = stack.cli("submit", str(ROOT_DIR / "examples/hello"), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id = parse_json_lines(submitted.stdout.replace("\n", " ") + "\n")[0]["id"]
    followed = stack.cli("follow", project_id, "--json", timeout_s=240)
    assert followed.returncode == 0, followed.stdout + followed.stderr + stack.logs()

    # Then the follower saw every event, in order, with no gap, ending with completion
    seen = parse_json_lines(followed.stdout)
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
    types = [e["type"] for e in seen]
    assert types[0] == "project_created"
    assert types[-1] == "project_completed"
    for expected in (
        "project_started",
        "iteration_started",
        "agent_output_chunk",
        "agent_tool_call",
        "tool_executed",
        "iteration_complete",
    ):
        assert expected in types
    ran = [e for e in seen if e["type"] == "tool_executed" and e["data"]["tool"] == "bash"]
    assert "Hello, Constellation!" in ran[0]["data"]["output"]

    # And the project completed, with the program in the final workspace
    status = stack.cli("status", project_id, "--json")
    assert '"status": "completed"' in status.stdout
    bare = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    program = subprocess.run(
        ["git", "-C", str(bare), "show", "main:hello.py"], capture_output=True, text=True
    )
    assert program.stdout == 'print("Hello, Constellation!")\n'
    author = subprocess.run(
        ["git", "-C", str(bare), "log", "-1", "--format=%an", "main"], capture_output=True, text=True
    ).stdout.strip()
    assert author.startswith("agent-")

    # And every message is in Postgres with its usage and cost
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        messages = list(
            session.scalars(select(Message).where(Message.project_id == project_id).order_by(Message.seq))
        )
        iteration = session.scalars(select(Iteration).where(Iteration.project_id == project_id)).one()
    assistant = [m for m in messages if m.role == "assistant"]
    assert len(assistant) == 3
    assert [m.input_tokens for m in assistant] == [1200, 1300, 1400]
    assert [m.cache_read_input_tokens for m in assistant] == [0, 900, 900]
    # claude-sonnet-4-6: $3 in, $15 out, cache write 3.75, cache read 0.30 per million tokens
    first = Decimal(1200 * 3 + 60 * 15) / 1_000_000 + Decimal(900 * 375) / 100_000_000
    assert assistant[0].cost_usd == first.quantize(Decimal("0.000001"))
    assert project.spent_usd == sum(m.cost_usd for m in assistant)
    assert iteration.completed_task
    assert iteration.files_changed == ["hello.py"]

    # And the SDK sent the tool results back to the model
    requests = stack.model_requests()
    assert len(requests) == 3
    second_call = requests[1]["body"]["messages"]
    results = [b for b in second_call[-1]["content"] if b["type"] == "tool_result"]
    assert results
    assert results[0]["is_error"] is False
    third_call = requests[2]["body"]["messages"]
    bash_result = [b for b in third_call[-1]["content"] if b["type"] == "tool_result"][0]
    assert "Hello, Constellation!" in str(bash_result["content"])

    # And `raas diff` shows what the iteration changed
    diff = stack.cli("diff", project_id, "--iteration", "1")
    assert diff.returncode == 0, diff.stderr
    assert "+++ b/hello.py" in diff.stdout
    assert '+print("Hello, Constellation!")' in diff.stdout

    # And no container is left behind
    assert containers_of(project_id) == []
