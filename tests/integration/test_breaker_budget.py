"""The circuit breaker and the budget, through real iterations: trips pause the project and say
why with the numbers; a half-open trial after the cooldown closes it on progress; a user's
resume resets it; the budget warns, pauses, and resumes when raised; receipts add up.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from orchestrator.queries.costs import cost_report
from orchestrator.queries.projects import get_project
from orchestrator.scheduling import lifecycle
from orchestrator.scheduling.reconcile import Reconciler
from shared import events
from shared.db import session_scope
from shared.models import PauseReason, Project, ProjectStatus, utcnow
from tests.support.engine import Engine, engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IDLE = {"content": [{"type": "text", "text": "thinking, changing nothing"}]}


def _project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


def _events(project_id: str, type_: str) -> list[dict[str, Any]]:
    with session_scope() as session:
        return [e.data for e in events.history(session, project_id) if e.type == type_]


@pytest.fixture
def idle_engine(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    script = {
        "responses": [
            IDLE,
            IDLE,
            IDLE,
            {
                "content": [
                    {"type": "tool_use", "name": "write", "input": {"path": "progress.txt", "content": "x"}}
                ]
            },
            {"content": [{"type": "text", "text": "made progress"}]},
            {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "done"}}]},
        ],
        "when_exhausted": "repeat_last",
    }
    with engine(script, tmp_path) as eng:
        yield eng


def test_no_progress_opens_the_breaker_and_a_half_open_trial_closes_it(idle_engine: Engine) -> None:
    eng = idle_engine
    toml = "max_iterations = 20\n[circuit_breaker]\nmax_no_progress = 3\ncooldown_s = 60\n"
    project_id = eng.submit(raas_toml=toml)
    # When three iterations in a row change nothing
    for _ in range(3):
        eng.run_next(project_id)
    # Then the project pauses, with the reason and the numbers
    project = _project(project_id)
    assert project.status == ProjectStatus.PAUSED
    trips = _events(project_id, events.CIRCUIT_BREAKER_TRIGGERED)
    assert trips[0]["reason"] == "no_progress"
    assert trips[0]["numbers"] == {"no_progress": 3, "threshold": 3}
    reconciler = Reconciler(eng.settings, eng.dispatcher, eng.bus)
    assert project_id not in reconciler.run_once().trials  # still cooling down
    # When the cooldown has passed, one trial iteration is let through (half-open)
    with session_scope() as session:
        breaker = dict(session.get_one(Project, project_id).breaker or {})
        breaker["opened_at"] = (utcnow() - timedelta(minutes=5)).isoformat()
        session.execute(update(Project).where(Project.id == project_id).values(breaker=breaker))
    assert project_id in reconciler.run_once().trials
    assert len([p for p, _ in eng.dispatcher.enqueued if p == project_id]) == 1
    eng.run_next(project_id)  # the trial writes a file: progress
    assert (_project(project_id).breaker or {})["state"] == "closed"
    eng.run_to_end(project_id)
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_resume_resets_an_open_breaker(idle_engine: Engine) -> None:
    eng = idle_engine
    project_id = eng.submit(raas_toml="max_iterations = 20\n[circuit_breaker]\nmax_no_progress = 2\n")
    eng.run_next(project_id)
    eng.run_next(project_id)
    assert _project(project_id).status == ProjectStatus.PAUSED
    lifecycle.resume_project(project_id, eng.dispatcher, eng.bus)
    project = _project(project_id)
    assert project.status == ProjectStatus.RUNNING
    assert (project.breaker or {})["state"] == "closed"
    assert (project.breaker or {})["no_progress"] == 0


def test_budget_warns_pauses_and_resumes_when_raised(services: dict[str, str], tmp_path: Path) -> None:
    costly = {
        "content": [{"type": "tool_use", "name": "bash", "input": {"command": "true"}}],
        "usage": {"input_tokens": 1000, "output_tokens": 1000},
    }
    with engine({"responses": [costly], "when_exhausted": "repeat_last"}, tmp_path) as eng:
        toml = "max_tokens = 1000\nmax_turns = 100\n[budget]\nlimit_usd = 0.1\nwarning_threshold = 0.5\n"
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)
        project = _project(project_id)
        assert project.status == ProjectStatus.PAUSED
        assert project.pause_reason == PauseReason.BUDGET_EXCEEDED
        assert (project.status_reason or "").startswith("spent $")
        # The API gives the reason's code and its words as two fields, each once
        shown = get_project(project_id)
        assert shown.pause_reason == PauseReason.BUDGET_EXCEEDED
        assert shown.status_reason == project.status_reason
        assert len(_events(project_id, events.BUDGET_WARNING)) == 1
        assert _events(project_id, events.BUDGET_EXCEEDED)
        # each call costs $0.018; the spend never passes the limit, and what is left would not
        # pay the next call's floor-sized answer (1,000 tokens here: max_tokens) at $15/M
        assert Decimal("0.1") - Decimal("0.015") < project.spent_usd <= Decimal("0.1")
        lifecycle.set_budget(project_id, Decimal("0.2"), eng.dispatcher, eng.bus)
        assert _project(project_id).status == ProjectStatus.RUNNING
        assert eng.dispatcher.pending(project_id)
        report = cost_report(project_id, with_receipts=True)
    assert report.total_usd == project.spent_usd
    assert report.receipts is not None
    receipt = report.receipts[0]
    assert receipt.model == "claude-sonnet-4-6"
    assert receipt.calls == report.tokens.input_tokens // 1000
    assert receipt.tokens.output_tokens == receipt.calls * 1000
    assert receipt.cost_usd == project.spent_usd
    assert receipt.price is not None
    assert receipt.price.input == Decimal(3)
    assert receipt.duration_s is not None
    assert [line.key for line in report.by_model] == ["claude-sonnet-4-6"]
