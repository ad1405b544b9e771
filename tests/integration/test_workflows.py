"""Workflows: task DAGs in waves, the pipeline's research and validator gate, planned projects,
subagents with their depth limit and reports, and fair admission between projects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from shared import events
from shared.dag import TaskKind
from shared.db import session_scope
from shared.models import Agent, Iteration, Project, ProjectStatus, Task, TaskStatus
from tests.support.engine import engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": args}]}


def text(words: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": words}]}


COMPLETE = tool("task_complete", summary="done")


def _project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


def _first_user_text(request: Any) -> str:
    return json.dumps(request.body["messages"][0]["content"])


def _types(project_id: str) -> list[str]:
    with session_scope() as session:
        return [e.type for e in events.history(session, project_id)]


def test_tasks_run_in_dependency_order_one_writer_at_a_time(services: dict[str, str], tmp_path: Path) -> None:
    toml = """
[[tasks]]
id = "a"
title = "first"
[[tasks]]
id = "b"
title = "second"
depends_on = ["a"]
[[tasks]]
id = "c"
title = "third"
depends_on = ["a"]
"""
    with engine({"responses": [COMPLETE], "when_exhausted": "repeat_last"}, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        assert len(eng.dispatcher.enqueued) == 1  # only a: b and c wait for it
        eng.run_next(project_id)
        # b and c are ready together, but only one builder may change the workspace at a time
        assert len([p for p, _ in eng.dispatcher.enqueued if p == project_id]) == 1
        eng.run_to_end(project_id)
        with session_scope() as session:
            tasks = {t.key: t for t in session.scalars(select(Task).where(Task.project_id == project_id))}
            order = [
                tasks_by_agent
                for tasks_by_agent in session.scalars(
                    select(Task.key)
                    .join(Agent, Agent.task_id == Task.id)
                    .join(Iteration, Iteration.agent_id == Agent.id)
                    .where(Task.project_id == project_id)
                    .order_by(Iteration.started_at)
                )
            ]
    assert {k: t.wave for k, t in tasks.items()} == {"a": 0, "b": 1, "c": 1}
    assert all(t.status == TaskStatus.COMPLETED for t in tasks.values())
    assert order[0] == "a"
    assert sorted(order[1:]) == ["b", "c"]
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_pipeline_researches_builds_and_gates_on_the_check(services: dict[str, str], tmp_path: Path) -> None:
    toml = 'workflow = "pipeline"\ncheck_command = "test -f done.txt"\nresearch = ["searcher"]\n'
    script = {
        "responses": [
            text("REPORT: the entry point is main.py"),  # the searcher
            COMPLETE,  # the builder claims done without doing it
            tool("write", path="done.txt", content="yes\n"),  # sent back with the check's output
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml, files={"main.py": "print(1)\n"})
        eng.run_to_end(project_id)
        requests = eng.requests(project_id)
        with session_scope() as session:
            validations = [
                e.data for e in events.history(session, project_id) if e.type == events.TASK_VALIDATED
            ]
            searcher = session.scalars(
                select(Agent).where(Agent.project_id == project_id, Agent.category == "searcher")
            ).one()
    assert searcher.parallel
    assert searcher.depth == 1
    assert "REPORT: the entry point is main.py" in _first_user_text(requests[1])
    assert "exited with 1" in _first_user_text(requests[2])
    assert [v["passed"] for v in validations] == [False, True]
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_a_category_of_ones_own_with_the_validator_role_gates_a_pipeline_task(
    services: dict[str, str], tmp_path: Path
) -> None:
    toml = (
        'workflow = "pipeline"\ncheck_command = "test -f done.txt"\nresearch = []\nvalidator = "review"\n'
        '[categories.review]\nrole = "validator"\ndescription = "Our own gate."\n'
    )
    script = {
        "responses": [
            COMPLETE,  # the builder claims done without doing it
            tool("write", path="done.txt", content="yes\n"),  # sent back with the check's output
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_to_end(project_id)
        requests = eng.requests(project_id)
        with session_scope() as session:
            validations = [e for e in events.history(session, project_id) if e.type == events.TASK_VALIDATED]
            gates = {session.get_one(Agent, e.agent_id).category for e in validations}
            categories = set(session.scalars(select(Agent.category).where(Agent.project_id == project_id)))
    # The check ran as the review agent (no model call of its own) and sent the builder back once
    assert len(requests) == 3
    assert "exited with 1" in _first_user_text(requests[1])
    assert [e.data["passed"] for e in validations] == [False, True]
    assert gates == {"review"}
    assert categories == {"builder", "review"}
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_planned_project_runs_the_plan_its_planner_wrote(services: dict[str, str], tmp_path: Path) -> None:
    cyclic = [
        {"id": "x", "title": "x", "depends_on": ["y"]},
        {"id": "y", "title": "y", "depends_on": ["x"]},
    ]
    good = [{"id": "x", "title": "make x"}, {"id": "y", "title": "make y", "depends_on": ["x"]}]
    plan = {"objectives": ["x and y"], "exit_criteria": ["both exist"]}
    script = {
        "responses": [
            tool("submit_plan", **plan, tasks=cyclic),
            tool("submit_plan", **plan, tasks=good),
            COMPLETE,
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml='workflow = "planned"\n')
        eng.run_to_end(project_id)
        second = eng.requests(project_id)[1]
        with session_scope() as session:
            tasks = {
                t.key: t.status for t in session.scalars(select(Task).where(Task.project_id == project_id))
            }
    refusal = json.dumps(second.body["messages"][-1]["content"])
    assert "Plan refused" in refusal
    assert "cycle" in refusal
    assert tasks == {"plan": TaskStatus.COMPLETED, "x": TaskStatus.COMPLETED, "y": TaskStatus.COMPLETED}
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_subagent_runs_in_its_own_iteration_and_its_report_reaches_the_parent(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {
        "responses": [
            tool("spawn_subagent", category="searcher", prompt="find the config"),
            text("Spawned; ending my turn."),
            text("CHILD REPORT: config lives in settings.ini"),
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_to_end(project_id)
        with session_scope() as session:
            agents = session.scalars(select(Agent).where(Agent.project_id == project_id)).all()
            child_iterations = session.scalars(
                select(Iteration).join(Agent).where(Agent.project_id == project_id, Agent.depth == 1)
            ).all()
        requests = eng.requests(project_id)
    child = next(a for a in agents if a.depth == 1)
    assert child.category == "searcher"
    assert child.parallel
    assert "CHILD REPORT" in (child.report or "")
    assert len(child_iterations) == 1
    assert "CHILD REPORT: config lives in settings.ini" in _first_user_text(requests[3])
    assert events.SUBAGENT_SPAWNED in _types(project_id)
    assert _project(project_id).status == ProjectStatus.COMPLETED


def test_spawn_past_the_depth_limit_is_refused_to_the_model(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [tool("spawn_subagent", category="searcher", prompt="x"), COMPLETE]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml="max_subagent_depth = 0\n")
        eng.run_to_end(project_id)
        answer = json.dumps(eng.requests(project_id)[1].body["messages"][-1]["content"])
        with session_scope() as session:
            count = len(session.scalars(select(Agent).where(Agent.project_id == project_id)).all())
    assert "Refused: subagents may not be deeper than 0" in answer
    assert count == 1


def test_one_projects_many_subagents_do_not_queue_ahead_of_another_project(
    services: dict[str, str], tmp_path: Path
) -> None:
    spawns = [
        {
            "type": "tool_use",
            "name": "spawn_subagent",
            "input": {"category": "searcher", "prompt": f"look {i}"},
        }
        for i in range(8)
    ]
    script = {"responses": [{"content": spawns}, text("spawned")], "when_exhausted": "repeat_last"}
    with engine(script, tmp_path) as eng:
        busy = eng.submit(raas_toml="max_parallel = 2\n")
        eng.run_next(busy)  # the root spawns 8 searchers
        queued_for_busy = [p for p, _ in eng.dispatcher.enqueued if p == busy]
        other = eng.submit()
        position = [p for p, _ in eng.dispatcher.enqueued].index(other)
    assert len(queued_for_busy) == 2  # the other 6 wait in the database, not in the queue
    assert position == 2  # the other project's loop is third in line, not ninth


def test_graph_shows_tasks_by_wave_and_agents_with_their_parents(
    services: dict[str, str], tmp_path: Path
) -> None:
    from orchestrator.queries.graph import project_graph

    toml = '[[tasks]]\nid = "a"\ntitle = "first"\n[[tasks]]\nid = "b"\ntitle = "second"\ndepends_on = ["a"]\n'
    script = {
        "responses": [
            {
                "content": [
                    {"type": "text", "text": "looking"},
                    *tool("spawn_subagent", category="searcher", prompt="x")["content"],
                ]
            },
            text("spawned"),
            text("child report"),
        ],
        "when_exhausted": "repeat_last",
    }
    with engine({**script, "responses": [*script["responses"], COMPLETE]}, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)  # a's builder spawns a searcher
        graph = project_graph(project_id)
    assert [[t.key for t in wave] for wave in graph.waves] == [["a"], ["b"]]
    roots = [a for a in graph.agents if a.type == "root"]
    subs = [a for a in graph.agents if a.type == "sub"]
    assert len(roots) == 1
    assert len(subs) == 1
    assert roots[0].task == "a"
    assert roots[0].last_output is not None
    assert "spawned" in roots[0].last_output
    assert [(e.parent, e.child) for e in graph.edges] == [(roots[0].id, subs[0].id)]


SCUD_GRAPH = """# SCUD Graph v1
# Phase: api

@meta {
  name api
}

@nodes
# id | title | status | complexity | priority
1 | Schema | D | 2 | H
2 | Endpoints \\| routes | P | 3 | M
3 | Docs | P | 1 | L

@edges
# dependent -> dependency
2 -> 1
3 -> 2
"""


def test_a_scud_graph_runs_its_open_tasks_and_marks_them_done(
    services: dict[str, str], tmp_path: Path
) -> None:
    import subprocess

    with engine({"responses": [COMPLETE], "when_exhausted": "repeat_last"}, tmp_path) as eng:
        project_id = eng.submit(files={".scud/tasks/tasks.scg": SCUD_GRAPH})
        eng.run_to_end(project_id)
        with session_scope() as session:
            tasks = {
                t.key: t.status for t in session.scalars(select(Task).where(Task.project_id == project_id))
            }
        repo = eng.settings.workspaces_dir() / f"{project_id}.git"
        written = subprocess.run(
            ["git", "-C", str(repo), "show", "main:.scud/tasks/tasks.scg"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert tasks == {"api:2": TaskStatus.COMPLETED, "api:3": TaskStatus.COMPLETED}  # 1 was already done
    assert "2 | Endpoints \\| routes | D" in written
    assert "3 | Docs | D" in written
    assert _project(project_id).status == ProjectStatus.COMPLETED


SCUD_PARENTS = """# SCUD Graph v1
# Phase: api

@nodes
# id | title | status | complexity | priority
1 | Login | X | 5 | H
1.1 | Parse credentials | P | 2 | H
1.2 | Issue a token | P | 3 | H
2 | Docs | P | 1 | L

@edges
# dependent -> dependency
1.2 -> 1.1
2 -> 1

@parents
# parent: subtasks...
1: 1.1, 1.2
"""


def test_a_scud_parent_is_done_with_its_last_subtask_and_never_given_to_a_model(
    services: dict[str, str], tmp_path: Path
) -> None:
    import subprocess

    from orchestrator.queries.graph import project_graph

    with engine({"responses": [COMPLETE], "when_exhausted": "repeat_last"}, tmp_path) as eng:
        # Given a SCUD parent with two subtasks, and a task that depends on the parent
        project_id = eng.submit(files={".scud/tasks/tasks.scg": SCUD_PARENTS})
        # When the project runs to its end
        eng.run_to_end(project_id)
        graph = project_graph(project_id)
        with session_scope() as session:
            worked = set(
                session.scalars(
                    select(Task.key)
                    .join(Agent, Agent.task_id == Task.id)
                    .join(Iteration, Iteration.agent_id == Agent.id)
                    .where(Task.project_id == project_id)
                )
            )
        repo = eng.settings.workspaces_dir() / f"{project_id}.git"
        written = subprocess.run(
            ["git", "-C", str(repo), "show", "main:.scud/tasks/tasks.scg"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    # Then the parent is done in the graph and in the file, and no iteration worked it
    assert [[(t.key, t.status) for t in wave] for wave in graph.waves] == [
        [("api:1.1", TaskStatus.COMPLETED)],
        [("api:1.2", TaskStatus.COMPLETED)],
        [("api:1", TaskStatus.COMPLETED)],
        [("api:2", TaskStatus.COMPLETED)],
    ]
    assert [t.kind for wave in graph.waves for t in wave] == [
        TaskKind.WORK,
        TaskKind.WORK,
        TaskKind.GROUP,
        TaskKind.WORK,
    ]
    assert worked == {"api:1.1", "api:1.2", "api:2"}
    assert "1 | Login | D | 5 | H" in written
    assert "1.2 | Issue a token | D | 3 | H" in written
    assert _project(project_id).status == ProjectStatus.COMPLETED
