"""The dialectic workflow (issue #27 point 4): a reviewer that is not the builder.

Through the real engine (Postgres, Docker sandboxes, the coordinator's advance) and the scripted
model, whose request log shows what each agent was sent: the reviewer runs on another model with
read-only tools and none of the builder's history, its critique opens the builder's next
iteration, the rounds stop at ``[dialectic] review_rounds``, and the check command stays the gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from shared import events
from shared.db import session_scope
from shared.models import Agent, Project, ProjectStatus
from tests.support.engine import engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CHECK = "grep -qx 42 answer.txt"
TOML = f'workflow = "dialectic"\ncheck_command = "{CHECK}"\n'
PROMPT = "Write the answer, 42, alone on the first line of answer.txt."


def tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": args}]}


def complete(summary: str) -> dict[str, Any]:
    return tool("task_complete", summary=summary)


def _is_reviewer(request: Any) -> bool:
    return "You are the reviewer" in json.dumps(request.body["system"])


def _opening(request: Any) -> str:
    return json.dumps(request.body["messages"][0]["content"])


def _tool_names(request: Any) -> set[str]:
    return {spec["name"] for spec in request.body["tools"]}


def _run(
    tmp_path: Path, script: list[dict[str, Any]], toml: str
) -> tuple[str, list[Any], list[Agent], list[bool]]:
    with engine({"responses": script}, tmp_path) as eng:
        project_id = eng.submit(prompt=PROMPT, raas_toml=toml)
        eng.run_to_end(project_id, limit=30)
        requests = eng.requests(project_id)
        with session_scope() as session:
            agents = list(
                session.scalars(
                    select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at)
                )
            )
            validations = [
                bool(e.data["passed"])
                for e in events.history(session, project_id)
                if e.type == events.TASK_VALIDATED
            ]
            status = session.get_one(Project, project_id).status
    assert status == ProjectStatus.COMPLETED
    return project_id, requests, agents, validations


def test_reviewer_critiques_each_round_until_the_cap_and_the_check_still_gates(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given a builder that gets the answer wrong twice, a reviewer that says so, and a check
    script = [
        tool("write", path="answer.txt", content="41\n"),  # builder, iteration 1
        complete("wrote the answer"),
        complete("CRITIQUE-ONE: answer.txt says 41; the task asks for 42."),  # reviewer, round 1
        tool("write", path="answer.txt", content="4 2\n"),  # builder, iteration 2
        complete("fixed the answer"),
        complete("CRITIQUE-TWO: '4 2' is not '42'."),  # reviewer, round 2: the last
        complete("I believe it is right"),  # builder, iteration 3: no review now, the check runs
        tool("write", path="answer.txt", content="42\n"),  # builder, iteration 4, after the check failed
        complete("42 at last"),
    ]
    # When the project runs to its end
    _, requests, agents, validations = _run(tmp_path, script, TOML)
    reviews = [r for r in requests if _is_reviewer(r)]
    building = [r for r in requests if not _is_reviewer(r)]
    openings = [r for r in building if len(r.body["messages"]) == 1]

    # Then two reviews ran (the cap), each one agent's one call, on another model than the builder's
    reviewers = [a for a in agents if a.category == "reviewer"]
    assert len(reviewers) == 2
    assert len(reviews) == 2
    assert {r.body["model"] for r in reviews} == {"claude-opus-4-6"}
    assert {r.body["model"] for r in building} == {"claude-sonnet-4-6"}
    # with read-only tools only, and none of the builder's history: one opening message of its own
    for review in reviews:
        assert _tool_names(review) == {"read", "glob", "grep", "task_complete"}
        assert len(review.body["messages"]) == 1
        opening = _opening(review)
        assert "answer.txt" in opening
        assert "tool_use" not in opening
        assert "You are an autonomous coding agent" not in json.dumps(review.body["system"])
    assert "says the task is done" in _opening(reviews[0])
    assert "wrote the answer" in _opening(reviews[0])  # the builder's summary, quoted
    # And each critique opens the builder's next iteration, and only that one
    assert len(openings) == 4
    assert "CRITIQUE-ONE" not in _opening(openings[0])
    assert "CRITIQUE-ONE" in _opening(openings[1])
    assert "CRITIQUE-TWO" in _opening(openings[2])
    assert "CRITIQUE" not in _opening(openings[3])
    # And the check is the gate: the builder's "done" after the last review failed it, and it
    # went back to the builder with the check's output before the task completed
    assert "exited with 1" in _opening(openings[3])
    assert validations == [False, True]
    assert all(a.parent_id == agents[0].id for a in reviewers)


def test_no_review_rounds_is_the_plain_gated_loop(services: dict[str, str], tmp_path: Path) -> None:
    # Given review_rounds = 0: the dialectic project has no reviewer, only the gate
    toml = TOML + "[dialectic]\nreview_rounds = 0\n"
    script = [tool("write", path="answer.txt", content="42\n"), complete("done")]
    _, requests, agents, validations = _run(tmp_path, script, toml)
    assert not [r for r in requests if _is_reviewer(r)]
    assert {a.category for a in agents} == {"builder", "validator"}
    assert validations == [True]


def test_an_iteration_that_changed_nothing_and_is_not_done_is_not_reviewed(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given a builder whose first iteration only looks around, and review_rounds = 1
    toml = TOML + "[dialectic]\nreview_rounds = 1\n"
    script = [
        tool("glob", pattern="*"),  # builder, iteration 1: nothing changed, not done
        {"content": [{"type": "text", "text": "Looked around; ending my turn."}]},
        tool("write", path="answer.txt", content="42\n"),  # builder, iteration 2
        complete("done"),
        complete("CRITIQUE: fine."),  # the one review, of iteration 2
        complete("done, having read the critique"),  # builder, iteration 3: the gate passes
    ]
    _, requests, _, validations = _run(tmp_path, script, toml)
    reviews = [r for r in requests if _is_reviewer(r)]
    assert len(reviews) == 1
    assert "iteration 2" in _opening(reviews[0])
    assert validations == [True]


def test_rotating_lead_swaps_the_builders_and_reviewers_configurations_each_round(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given rotate = true: round 1 sonnet builds and opus reviews, round 2 the other way round
    toml = TOML + "[dialectic]\nrotate = true\n"
    script = [
        tool("write", path="answer.txt", content="41\n"),  # the builder (sonnet), iteration 1
        complete("wrote it"),
        complete("CRITIQUE-ONE: 41 is not 42."),  # the reviewer (opus)
        tool("write", path="answer.txt", content="42\n"),  # the rotated builder (opus), its iteration 1
        complete("fixed"),
        complete("CRITIQUE-TWO: now right."),  # the rotated reviewer (sonnet), read-only too
        complete("agreed, done"),  # the builder (sonnet) leads again, iteration 2; the gate passes
    ]
    _, requests, agents, validations = _run(tmp_path, script, toml)
    sonnet, opus = "claude-sonnet-4-6", "claude-opus-4-6"
    assert [r.body["model"] for r in requests] == [sonnet, sonnet, opus, opus, opus, sonnet, sonnet]
    reviews = [r for r in requests if _is_reviewer(r)]
    assert [r.body["model"] for r in reviews] == [opus, sonnet]
    assert all(_tool_names(r) == {"read", "glob", "grep", "task_complete"} for r in reviews)
    assert "write" in _tool_names(requests[3])  # the rotated builder builds
    assert "CRITIQUE-ONE" in _opening(requests[3])
    assert "CRITIQUE-TWO" in _opening(requests[6])
    assert [a.category for a in agents if a.parent_id is None and a.category != "validator"] == [
        "builder",
        "builder-rotated",
    ]
    assert validations == [True]
