"""Write a graph as the scud CLI does, and record task statuses in a user's file in place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from shared.errors import InvalidInput, RaasError
from shared.scud.model import (
    CLOSED,
    DONE,
    PRIORITIES,
    STATUSES,
    ScudGraph,
    ScudPhase,
    ScudTask,
    _resolve,
    parent_done,
    status_code,
)
from shared.scud.parse import _parse
from shared.scud.syntax import _OPAQUE, _escape, _split


def dump_scg(graph: ScudGraph) -> str:
    """Write `graph` as the scud CLI writes it; `parse_scg(dump_scg(g)) == g` for parsed graphs."""
    return "\n---\n\n".join(_dump_phase(phase) for phase in graph.phases)


def _dump_phase(phase: ScudPhase) -> str:
    tasks = phase.tasks
    lines = ["# SCUD Graph v1", *([f"# Phase: {phase.name}"] if phase.name else []), ""]
    if phase.meta:
        lines += ["@meta {", *(f"  {key} {value}".rstrip() for key, value in phase.meta.items()), "}", ""]
    lines += ["@nodes", "# id | title | status | complexity | priority", *map(_node_row, tasks), ""]
    dependencies = [f"{t.id} -> {dep}" for t in tasks for dep in t.depends_on]
    if dependencies or phase.behavior_edges:
        lines += ["@edges", *(["# dependent -> dependency", *dependencies] if dependencies else [])]
        lines += ["", "# Behavioral edges", *phase.behavior_edges] if phase.behavior_edges else []
        lines.append("")
    sections = {
        "@parents\n# parent: subtasks...": [f"{t.id}: {', '.join(t.children)}" for t in tasks if t.children],
        "@assignments\n# id | assigned_to": [
            f"{t.id} | {_escape(t.assigned_to)}" for t in tasks if t.assigned_to
        ],
        "@agents\n# id | agent_type": [f"{t.id} | {_escape(t.agent_type)}" for t in tasks if t.agent_type],
        **{f"@{name}\n{comment}": phase.sections.get(name, []) for name, comment in _OPAQUE.items()},
        "@details": [
            f"{t.id} | {field} |\n" + "\n".join(f"  {line}" for line in value.split("\n"))
            for t in tasks
            for field, value in t.details.items()
        ],
    }
    for header, rows in sections.items():
        if rows:
            lines += [header, *rows, ""]
    return "\n".join(lines)


def _node_row(task: ScudTask) -> str:
    complexity = "" if task.complexity is None else str(task.complexity)
    priority = next((code for code, word in PRIORITIES.items() if word == task.priority), "")
    row = f"{task.id} | {_escape(task.title)} | {task.status} | {complexity} | {priority}"
    return f"{row} | {task.annotations}" if task.annotations else row.rstrip()


def _find(graph: ScudGraph, task_id: str) -> ScudTask:
    """The task with key `task_id`, or with bare id `task_id` if only one phase has it."""
    matches = [task for task in graph.tasks if task.key == task_id]
    matches = matches or [task for task in graph.tasks if task.id == task_id]
    if len(matches) == 1:
        return matches[0]
    if matches:
        keys = ", ".join(task.key for task in matches)
        msg = f"task id '{task_id}' is in several phases ({keys}); give it as phase:id"
    else:
        msg = f"no task '{task_id}' in the SCUD graph"
    raise InvalidInput(msg)


def _code(status: str) -> str:
    code = status_code(status)
    if code is None:
        msg = f"unknown SCUD status '{status}' (expected one of {', '.join(STATUSES)})"
        raise InvalidInput(msg)
    return code


def set_status(graph: ScudGraph, task_id: str, status: str) -> ScudGraph:
    """A copy of `graph` with one task's status changed (`status` as a code or a name)."""
    code = _code(status)
    changed = graph.model_copy(deep=True)
    _find(changed, task_id).status = code
    return changed


def write_back(path: Path, statuses: Mapping[str, str]) -> None:
    """Record finished tasks' statuses in the user's tasks.scg, changing nothing else.

    The file is read again (the user or scud may have edited it), only the status cells of the
    named task rows are rewritten in place, and the result replaces the file atomically, so a
    crash leaves the old file or the new one, never half of one. A parent whose children are
    then done (`parent_done`) is marked done too, as is its parent in turn.
    """
    path = path.resolve()  # through a symlink, so the link itself stays a link
    text = path.read_bytes().decode("utf-8")
    graph, rows = _parse(text, str(path))
    lines = text.split("\n")
    changes = {_find(graph, task_id).key: _code(status) for task_id, status in statuses.items()}
    for key, code in [*changes.items(), *_parents_done(graph, changes)]:
        lines[rows[key]] = _replace_status(lines[rows[key]], code)
    new_text = "\n".join(lines)
    if new_text == text:
        return
    if _parse(new_text, str(path))[0] != graph:  # never write a file that says something else
        msg = f"{path}: could not update statuses in place; the file is left as it was"
        raise RaasError(msg)
    _replace_file(path, new_text.encode("utf-8"))


def _parents_done(graph: ScudGraph, changes: Mapping[str, str]) -> list[tuple[str, str]]:
    """Apply `changes` to `graph`, then mark done each open parent whose children are done."""
    index = {task.key: task for task in graph.tasks}
    for key, code in changes.items():
        index[key].status = code
    done: list[tuple[str, str]] = []
    while True:  # a parent marked done may complete its own parent: repeat until nothing changes
        found = [
            task
            for task in graph.tasks
            if task.children
            and task.status not in CLOSED
            and parent_done(
                child.status for ref in task.children if (child := _resolve(index, ref, task.phase))
            )
        ]
        if not found:
            return done
        for task in found:
            task.status = DONE
            done.append((task.key, DONE))


def _replace_status(row: str, code: str) -> str:
    """The task row with its status cell set to `code`, spacing and line ending kept."""
    body, end = (row[:-1], "\r") if row.endswith("\r") else (row, "")
    cells = _split(body)
    if len(cells) < 3:
        return f"{body.rstrip()} | {code}{end}"
    old = cells[2]
    if old.strip():
        cells[2] = old.replace(old.strip(), code, 1)
    else:
        cells[2] = f" {code} " if len(cells) > 3 else f" {code}"
    return "|".join(cells) + end


def _replace_file(path: Path, data: bytes) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        shutil.copymode(path, tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
