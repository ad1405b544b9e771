"""A project's task DAG: the task spec, its validation, and the order tasks may run in.

Pure logic. The scheduler asks `ready()` what to enqueue next; `waves()` is what the CLI and the
API show as the plan. Every problem with a graph is reported as one `InvalidInput` line a user
can act on, because the graph usually comes straight from their raas.toml or SCUD file.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidInput

TASK_ID_PATTERN = r"^[A-Za-z0-9_.:-]+$"


class TaskKind(str, Enum):
    WORK = "work"
    """An agent works the task until it is complete."""
    GROUP = "group"
    """No work of its own (a SCUD parent task): complete when the tasks it depends on are, never
    given to an agent."""
    APPROVAL = "approval"
    """A person's decision (``raas approve``): ready, the project waits for it without a worker;
    approved, it is complete; rejected, the tasks it depends on go back to their builders."""


class TaskSpec(BaseModel):
    """One node of a project's task DAG, as written in raas.toml `[[tasks]]`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str = Field(pattern=TASK_ID_PATTERN)
    """Unique within the project: letters, digits and `_ . : -` (SCUD ids like `auth:1.2` fit)."""
    title: str
    """One line saying what the task is; shown in the plan and given to the agent."""
    description: str = ""
    """What the agent must do and how to know it is done."""
    category: str = "builder"
    """Agent category that works the task (model, tools, prompt template)."""
    depends_on: list[str] = Field(default_factory=list)
    """Ids of the tasks that must complete before this one starts."""
    kind: TaskKind = TaskKind.WORK
    """`work`; `group`: no agent works it, it completes when its dependencies have; `approval`: it
    waits for a person ([approvals] sets its deadline, default and approvers)."""


def validate_dag(tasks: Sequence[TaskSpec]) -> None:
    """Check that `tasks` form a DAG: unique ids, known dependencies, no cycles.

    Raises:
        InvalidInput: naming the first problem found, on one line.
    """
    ids: set[str] = set()
    for task in tasks:
        if task.id in ids:
            msg = f"task '{task.id}' is defined twice; give each task its own id"
            raise InvalidInput(msg)
        ids.add(task.id)
    for task in tasks:
        for dep in task.depends_on:
            if dep == task.id:
                msg = f"task '{task.id}' depends on itself; remove that dependency"
                raise InvalidInput(msg)
            if dep not in ids:
                raise InvalidInput(_unknown_dependency(task.id, dep, ids))
    cycle = _find_cycle(tasks)
    if cycle:
        msg = f"tasks form a cycle: {' -> '.join(cycle)}; remove one of these dependencies"
        raise InvalidInput(msg)


def _unknown_dependency(task_id: str, dep: str, ids: set[str]) -> str:
    msg = f"task '{task_id}' depends on unknown task '{dep}'"
    close = difflib.get_close_matches(dep, sorted(ids), n=1)
    return f"{msg}; did you mean '{close[0]}'?" if close else msg


def _find_cycle(tasks: Sequence[TaskSpec]) -> list[str]:
    """Return one cycle as a closed path `[a, b, c, a]` (each depends on the next), or `[]`.

    Iterative depth-first search, so a long chain of tasks cannot hit the recursion limit.
    Assumes every dependency names a known task.
    """
    deps = {task.id: task.depends_on for task in tasks}
    finished: set[str] = set()
    for root in deps:
        if root in finished:
            continue
        path: list[str] = [root]
        on_path = {root}
        pending = [iter(deps[root])]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                pending.pop()
                finished.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in finished:
                path.append(nxt)
                on_path.add(nxt)
                pending.append(iter(deps[nxt]))
    return []


def waves(tasks: Sequence[TaskSpec]) -> list[list[str]]:
    """Group task ids into topological levels (Kahn's algorithm).

    Wave 0 holds the tasks with no dependencies; every task sits one wave after its latest
    dependency, so all tasks of a wave may run in parallel. Ids are sorted within a wave so the
    plan shown to a user is the same on every run.

    Raises:
        InvalidInput: if `tasks` is not a valid DAG (see `validate_dag`).
    """
    validate_dag(tasks)
    waiting_on = {task.id: len(set(task.depends_on)) for task in tasks}
    dependents: dict[str, list[str]] = {task.id: [] for task in tasks}
    for task in tasks:
        for dep in set(task.depends_on):
            dependents[dep].append(task.id)
    current = sorted(task_id for task_id, count in waiting_on.items() if count == 0)
    result: list[list[str]] = []
    while current:
        result.append(current)
        unlocked: list[str] = []
        for task_id in current:
            for dependent in dependents[task_id]:
                waiting_on[dependent] -= 1
                if waiting_on[dependent] == 0:
                    unlocked.append(dependent)
        current = sorted(unlocked)
    return result


def ready(tasks: Sequence[TaskSpec], done: set[str], running: set[str]) -> list[str]:
    """Ids of the tasks that may start now, in the order `tasks` lists them.

    A task is ready when every dependency is done and it is itself neither done nor running.
    A dependency on an unknown id never counts as done: call `validate_dag` first.
    """
    return [
        task.id
        for task in tasks
        if task.id not in done and task.id not in running and all(dep in done for dep in task.depends_on)
    ]


class Plan(BaseModel):
    """What a planner submits: the objectives, how to know they are met, and the task graph."""

    model_config = ConfigDict(extra="forbid")

    objectives: list[str] = Field(min_length=1)
    exit_criteria: list[str] = Field(min_length=1)
    tasks: list[TaskSpec] = Field(min_length=1)
