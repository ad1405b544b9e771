"""Lifecycle: pause, resume, stop and a new prompt while running; bad requests change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.scheduling import lifecycle
from shared import events
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput, NotFound
from shared.models import Iteration, IterationStatus, Project, ProjectStatus
from tests.support.engine import Engine, engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

WORK_THEN_COMPLETE = {
    "responses": [
        {"content": [{"type": "text", "text": "Still working."}]},
        {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "ok"}}]},
    ],
    "when_exhausted": "repeat_last",
}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(WORK_THEN_COMPLETE, tmp_path) as running:
        yield running


def _project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


def _event_types(project_id: str) -> list[str]:
    with session_scope() as session:
        return [e.type for e in events.history(session, project_id)]


def test_pause_stops_before_the_next_llm_call_and_resume_goes_on(eng: Engine) -> None:
    # Given a running project whose first iteration is queued
    project_id = eng.submit()
    # When it is paused before a worker gets to it
    lifecycle.pause_project(project_id, eng.dispatcher, eng.bus)
    eng.run_next(project_id)
    # Then the worker made no LLM call and nothing more is enqueued
    assert _project(project_id).status == ProjectStatus.PAUSED
    assert eng.requests(project_id) == []
    assert not eng.dispatcher.pending(project_id)
    # When it is resumed, the next iteration runs, and the project completes
    lifecycle.resume_project(project_id, eng.dispatcher, eng.bus)
    eng.run_to_end(project_id)
    assert _project(project_id).status == ProjectStatus.COMPLETED
    types = _event_types(project_id)
    assert (
        types.index(events.PROJECT_PAUSED)
        < types.index(events.PROJECT_RESUMED)
        < types.index(events.PROJECT_COMPLETED)
    )


def test_stop_ends_the_project_and_drops_its_queued_iteration(eng: Engine) -> None:
    project_id = eng.submit()
    lifecycle.stop_project(project_id, eng.dispatcher, eng.bus)
    assert _project(project_id).status == ProjectStatus.STOPPED
    with session_scope() as session:
        statuses = list(session.scalars(select(Iteration.status).where(Iteration.project_id == project_id)))
    assert statuses == [IterationStatus.FAILED]
    # What the dropped iteration had reserved for its first call is given back.
    assert _project(project_id).reserved_usd == 0
    assert _project(project_id).spent_usd == 0
    eng.run_next(project_id)  # the message still arrives: it does nothing
    assert eng.requests(project_id) == []
    assert _event_types(project_id)[-1] == events.PROJECT_STOPPED


def test_a_new_prompt_is_read_by_the_next_iteration(eng: Engine) -> None:
    project_id = eng.submit(prompt="First instructions.")
    eng.run_next(project_id)
    lifecycle.set_prompt(project_id, "Second instructions, edited while running.", eng.dispatcher, eng.bus)
    eng.run_next(project_id)
    systems = [str(r.body["system"]) for r in eng.requests(project_id)]
    assert "First instructions." in systems[0]
    assert "Second instructions, edited while running." in systems[-1]
    assert events.PROMPT_UPDATED in _event_types(project_id)


def test_bad_lifecycle_requests_are_refused_and_change_nothing(eng: Engine) -> None:
    project_id = eng.submit()
    eng.run_to_end(project_id)
    before = (_project(project_id).status, _event_types(project_id))
    with pytest.raises(Conflict, match="is completed; only a paused project can be resumed"):
        lifecycle.resume_project(project_id, eng.dispatcher, eng.bus)
    with pytest.raises(Conflict, match="only a running project can be paused"):
        lifecycle.pause_project(project_id, eng.dispatcher, eng.bus)
    with pytest.raises(NotFound, match="no project 'nope'"):
        lifecycle.pause_project("nope", eng.dispatcher, eng.bus)
    with pytest.raises(InvalidInput, match="empty"):
        lifecycle.set_prompt(project_id, "  \n", eng.dispatcher, eng.bus)
    assert (_project(project_id).status, _event_types(project_id)) == before
