"""Turn a graph into the DAG nodes Constellation runs: the tasks still to do, with their dependencies."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from shared.dag import TaskKind, TaskSpec
from shared.scud.model import CLOSED, DONE, ScudGraph, ScudTask, _resolve, parent_done


def to_task_specs(graph: ScudGraph, categories: Collection[str] | None = None) -> list[TaskSpec]:
    """The tasks still to run, as DAG nodes with phase-qualified ids.

    Left out: tasks done, cancelled or deferred (D, C, F) and everything under such a parent.
    Pending, in-progress, review, blocked and failed tasks run: their work is not known to be
    finished. A parent's work is its children's: it becomes a `group` node, given to no agent and
    complete once the nodes under it are, when that makes it done (`parent_done`, the rule
    `write_back` marks it done by). A parent with nothing left to run, or kept open by a deferred
    child, is left out, and a dependency on it becomes one on its runnable children. A dependency
    on a left-out task is dropped: done is satisfied, and cancelled or deferred work will not
    come, so waiting on it would stall the project forever. Children inherit their parent's
    dependencies. Unknown references are kept as they are, so `validate_dag` names them.

    Args:
        categories: the agent categories the project defines. A task's SCUD agent type becomes
            its category when it is one of them (or always, when None); otherwise `builder`.
    """
    index = {task.key: task for task in graph.tasks}
    specs = []
    for task in graph.tasks:
        if _closed(task, index):
            continue
        if not task.children:
            depends_on, kind = _dependencies(task, index), TaskKind.WORK
        elif _is_group(task, index):
            depends_on, kind = _parts(task, index), TaskKind.GROUP
        else:
            continue
        specs.append(
            TaskSpec(
                id=task.key,
                title=task.title,
                description=_description(task, index),
                category=_category(task.agent_type, categories),
                depends_on=depends_on,
                kind=kind,
            )
        )
    return specs


def _finishes(task: ScudTask, index: Mapping[str, ScudTask], seen: set[str]) -> bool:
    """Whether the task is done once the project has run (not counting its closed ancestors)."""
    if task.status in CLOSED or not task.children:
        return task.status == DONE or task.status not in CLOSED
    if task.key in seen:  # a parent loop, which only a hand-built graph can have
        return False
    children = [child for ref in task.children if (child := _resolve(index, ref, task.phase))]
    return parent_done(
        DONE if _finishes(child, index, seen | {task.key}) else child.status for child in children
    )


def _category(agent_type: str | None, categories: Collection[str] | None) -> str:
    if agent_type and (categories is None or agent_type in categories):
        return agent_type
    return "builder"


def _ancestors(task: ScudTask, index: Mapping[str, ScudTask]) -> list[ScudTask]:
    """Parent, grandparent, ...; stops at a loop, which only a hand-built graph can have."""
    chain: dict[str, ScudTask] = {}
    parent = _resolve(index, task.parent, task.phase) if task.parent else None
    while parent is not None and parent.key not in chain and parent.key != task.key:
        chain[parent.key] = parent
        parent = _resolve(index, parent.parent, parent.phase) if parent.parent else None
    return list(chain.values())


def _closed(task: ScudTask, index: Mapping[str, ScudTask]) -> bool:
    return any(node.status in CLOSED for node in [task, *_ancestors(task, index)])


def _dependencies(task: ScudTask, index: Mapping[str, ScudTask]) -> list[str]:
    lineage = [task, *_ancestors(task, index)]
    skip = {node.key for node in lineage}
    result: list[str] = []
    for node in lineage:
        for ref in node.depends_on:
            target = _resolve(index, ref, node.phase)
            result += _runnable_keys(target, index, skip) if target else [ref]
    return list(dict.fromkeys(result))


def _runnable_keys(task: ScudTask, index: Mapping[str, ScudTask], skip: set[str]) -> list[str]:
    """What depending on `task` means: on itself (a task or a group), on its runnable
    descendants (a parent this run cannot finish), or on nothing."""
    if task.key in skip or _closed(task, index):
        return []
    if not task.children or _is_group(task, index):
        return [task.key]
    return _parts(task, index, skip)


def _parts(task: ScudTask, index: Mapping[str, ScudTask], skip: Collection[str] = ()) -> list[str]:
    """The nodes a parent's children become: what a group waits for."""
    keys: list[str] = []
    for ref in task.children:
        child = _resolve(index, ref, task.phase)
        keys += _runnable_keys(child, index, {*skip, task.key}) if child else []
    return keys


def _is_group(task: ScudTask, index: Mapping[str, ScudTask]) -> bool:
    """An open parent that is done once this run's tasks under it are (it has some)."""
    return bool(task.children) and _finishes(task, index, set()) and bool(_parts(task, index))


def _description(task: ScudTask, index: Mapping[str, ScudTask]) -> str:
    """The detail fields, description first; a subtask also says what it is part of."""
    parts = [task.details.get("description", "")]
    for field, value in task.details.items():
        if field != "description":
            parts.append(f"## {field.replace('_', ' ').capitalize()}\n{value}")
    parents = _ancestors(task, index)[:1]
    parts += [f"## Part of\n{parent.title}\n\n{_description(parent, index)}".strip() for parent in parents]
    return "\n\n".join(part for part in parts if part.strip())
