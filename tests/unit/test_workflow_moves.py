"""Workflow moves (orchestrator/scheduling/workflows.py, advance.py): what a project does next
when an iteration reports back.

``ralph``: a builder per task loops until it completes the task; tasks start as the tasks they
depend on complete. ``pipeline``: research subagents, then the builder with their reports, then
the validator's check, which sends a failing task back to the builder with the output.
``planned``: a planner alone, then the tasks of its plan in waves. Specs on a migrated SQLite
file: the worker's part is its real record keeping with an outcome the spec chooses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from shared.dag import TaskKind
from shared.db import session_scope
from shared.models import Agent, AgentStatus, Iteration, Project, ProjectStatus, Task, TaskStatus
from tests.support.coordinator import Coordinator, migrated_template, sqlite_database

pytestmark = pytest.mark.unit

CHECK = "pytest -q"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("workflows"))


@pytest.fixture
def coordinator(template: Path, tmp_path: Path) -> Iterator[Coordinator]:
    with sqlite_database(template, tmp_path / "raas.db"):
        yield Coordinator()


def tasks(*specs: str) -> list[dict[str, object]]:
    """`[[tasks]]` from "id" or "id<-dep,dep" strings."""
    result: list[dict[str, object]] = []
    for spec in specs:
        key, _, deps = spec.partition("<-")
        result.append({"id": key, "title": f"task {key}", "depends_on": deps.split(",") if deps else []})
    return result


def project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


def task_statuses(project_id: str) -> dict[str, TaskStatus]:
    with session_scope() as session:
        return {t.key: t.status for t in session.scalars(select(Task).where(Task.project_id == project_id))}


def task_of(iteration: Iteration) -> str:
    with session_scope() as session:
        agent = session.get_one(Agent, iteration.agent_id)
        return session.get_one(Task, agent.task_id).key


def in_flight(coordinator: Coordinator) -> list[tuple[str, str]]:
    """(task, category) of every iteration in flight."""
    return [(task_of(it), coordinator.category_of(it)) for it in coordinator.in_flight()]


# --- ralph --------------------------------------------------------------------------------------


def test_a_project_without_tasks_is_one_builder_working_the_prompt(coordinator: Coordinator) -> None:
    coordinator.start()
    assert in_flight(coordinator) == [("main", "builder")]


def test_a_builder_that_has_not_completed_its_task_gets_its_next_iteration(coordinator: Coordinator) -> None:
    coordinator.start()
    first = coordinator.run_next(completed=False)
    (second,) = coordinator.in_flight()
    assert (second.agent_id, second.number) == (first.agent_id, 2)


def test_tasks_start_as_the_tasks_they_depend_on_complete_and_the_last_completes_the_project(
    coordinator: Coordinator,
) -> None:
    # Given a, then b and c after a, then d after both
    project_id = coordinator.start(tasks=tasks("a", "b<-a", "c<-a", "d<-b,c"))
    assert in_flight(coordinator) == [("a", "builder")]
    # When a completes, b and c start (their builders take turns writing the workspace)
    coordinator.run_next(completed=True)
    assert task_statuses(project_id) == {
        "a": TaskStatus.COMPLETED,
        "b": TaskStatus.RUNNING,
        "c": TaskStatus.RUNNING,
        "d": TaskStatus.PENDING,
    }
    # Then d waits for both, and its completion completes the project
    coordinator.run_next(completed=True)
    assert task_statuses(project_id)["d"] == TaskStatus.PENDING
    coordinator.run_next(completed=True)
    assert in_flight(coordinator) == [("d", "builder")]
    coordinator.run_next(completed=True)
    assert project(project_id).status == ProjectStatus.COMPLETED


def test_a_task_needs_completion_threshold_completing_iterations_in_a_row(coordinator: Coordinator) -> None:
    project_id = coordinator.start(completion_threshold=2)
    coordinator.run_next(completed=True)
    assert task_statuses(project_id) == {"main": TaskStatus.RUNNING}
    coordinator.run_next(completed=True)
    assert task_statuses(project_id) == {"main": TaskStatus.COMPLETED}


def test_a_task_not_completed_within_max_iterations_fails_the_project(coordinator: Coordinator) -> None:
    project_id = coordinator.start(max_iterations=2)
    coordinator.run_next(completed=False)
    coordinator.run_next(completed=False)
    failed = project(project_id)
    assert failed.status == ProjectStatus.FAILED
    assert failed.status_reason == "task 'main': max_iterations (2) reached without task_complete"
    assert coordinator.in_flight() == []


def test_a_group_task_completes_with_the_tasks_it_waits_for_and_no_agent_works_it(
    coordinator: Coordinator,
) -> None:
    # Given a group over a and b (a SCUD parent), and c after the group
    group = {"id": "g", "title": "both", "kind": "group", "depends_on": ["a", "b"]}
    project_id = coordinator.start(tasks=[*tasks("a", "b"), group, *tasks("c<-g")])
    # When a and b complete
    coordinator.run_next(completed=True)
    assert task_statuses(project_id)["g"] == TaskStatus.PENDING
    coordinator.run_next(completed=True)
    # Then the group is complete at once, c starts, and the group never had an agent
    assert task_statuses(project_id)["g"] == TaskStatus.COMPLETED
    assert in_flight(coordinator) == [("c", "builder")]
    with session_scope() as session:
        group_row = session.scalars(select(Task).where(Task.key == "g")).one()
        assert group_row.kind == TaskKind.GROUP
        assert session.scalars(select(Agent).where(Agent.task_id == group_row.id)).all() == []


# --- pipeline -----------------------------------------------------------------------------------


def test_a_pipeline_task_starts_with_its_research_subagents_while_its_builder_waits(
    coordinator: Coordinator,
) -> None:
    coordinator.start(workflow="pipeline", check_command=CHECK)
    assert sorted(in_flight(coordinator)) == [("main", "analyzer"), ("main", "searcher")]
    with session_scope() as session:
        builder = session.scalars(select(Agent).where(Agent.category == "builder")).one()
    assert builder.status == AgentStatus.BLOCKED


def test_the_builder_starts_once_the_last_research_subagent_has_reported_and_gets_the_reports(
    coordinator: Coordinator,
) -> None:
    # Given a pipeline task's two research subagents
    coordinator.start(workflow="pipeline", check_command=CHECK)
    first = coordinator.category_of(coordinator.run_next(summary="the code is in src/"))
    # When one has reported, the builder still waits for the other
    other = "analyzer" if first == "searcher" else "searcher"
    assert in_flight(coordinator) == [("main", other)]
    second = coordinator.category_of(coordinator.run_next(summary="nothing is tested yet"))
    # Then the builder starts, and its iteration is given both reports
    (builder,) = coordinator.in_flight()
    assert coordinator.category_of(builder) == "builder"
    assert set(coordinator.given(builder.id).reports) == {
        (first, "the code is in src/"),
        (second, "nothing is tested yet"),
    }


def test_a_builder_completing_hands_its_task_to_the_validator(coordinator: Coordinator) -> None:
    project_id = coordinator.start(workflow="pipeline", check_command=CHECK, research=[])
    coordinator.run_next(completed=True)
    assert in_flight(coordinator) == [("main", "validator")]
    assert task_statuses(project_id) == {"main": TaskStatus.RUNNING}


def test_a_failed_check_sends_the_task_back_to_the_builder_with_the_output(coordinator: Coordinator) -> None:
    # Given a builder that completed and a validator whose check fails
    project_id = coordinator.start(workflow="pipeline", check_command=CHECK, research=[])
    built = coordinator.run_next(completed=True)
    coordinator.run_next(completed=False, summary="FAILED test_login - assert 401 == 200")
    # Then the builder works the task again, and its next iteration is given the output
    (again,) = coordinator.in_flight()
    assert (again.agent_id, again.number) == (built.agent_id, 2)
    assert task_statuses(project_id) == {"main": TaskStatus.RUNNING}
    assert coordinator.given(again.id).feedback == "FAILED test_login - assert 401 == 200"


def test_a_passed_check_completes_the_task(coordinator: Coordinator) -> None:
    project_id = coordinator.start(workflow="pipeline", check_command=CHECK, research=[])
    coordinator.run_next(completed=True)
    coordinator.run_next(completed=True)
    assert task_statuses(project_id) == {"main": TaskStatus.COMPLETED}
    assert project(project_id).status == ProjectStatus.COMPLETED


def test_a_task_still_failing_its_check_after_max_iterations_fails_the_project(
    coordinator: Coordinator,
) -> None:
    project_id = coordinator.start(workflow="pipeline", check_command=CHECK, research=[], max_iterations=2)
    for _ in range(2):
        coordinator.run_next(completed=True)  # the builder
        coordinator.run_next(completed=False, summary="1 failed")  # the validator
    failed = project(project_id)
    assert failed.status == ProjectStatus.FAILED
    assert failed.status_reason == "task 'main': still failing its check after 2 iterations"


# --- planned ------------------------------------------------------------------------------------

PLAN = {
    "objectives": ["a greeting"],
    "exit_criteria": ["hello.py prints it"],
    "tasks": tasks("write", "test<-write", "docs<-write"),
}


def test_a_planned_project_starts_with_the_planner_alone(coordinator: Coordinator) -> None:
    project_id = coordinator.start(workflow="planned")
    assert in_flight(coordinator) == [("plan", "planner")]
    assert task_statuses(project_id) == {"plan": TaskStatus.RUNNING}


def test_the_accepted_plan_runs_in_waves(coordinator: Coordinator) -> None:
    # Given a planner that submits a plan of three tasks in two waves
    project_id = coordinator.start(workflow="planned")
    coordinator.run_next(completed=True, summary=json.dumps(PLAN))
    # Then only the first wave starts; the second starts when it is complete
    assert in_flight(coordinator) == [("write", "builder")]
    coordinator.run_next(completed=True)
    assert task_statuses(project_id) == {
        "plan": TaskStatus.COMPLETED,
        "write": TaskStatus.COMPLETED,
        "test": TaskStatus.RUNNING,
        "docs": TaskStatus.RUNNING,
    }
    coordinator.run_next(completed=True)
    coordinator.run_next(completed=True)
    assert project(project_id).status == ProjectStatus.COMPLETED
