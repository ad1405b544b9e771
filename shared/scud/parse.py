"""Read and write SCUD Graph v1 task files (`.scud/tasks/tasks.scg`), which users already keep.

The format is the one the `scud` CLI writes (pyrex41/scud, `formats/scg.rs`): phases (tags)
separated by `---`, each with a `# SCUD Graph v1` / `# Phase: tag` header, an `@meta { key value }`
block and the sections `@nodes`, `@edges`, `@parents`, `@assignments`, `@agents`, `@details`
(plus `@roles`, `@weave`, `@partitions`, `@locks`, kept but not used). We read more than scud
writes (`key: value` meta, priority and status words, no header, blank lines inside details)
and write exactly what it writes, so a file can go back and forth between the two tools.

A plain id names a task of the same phase, `phase:id` a task of any phase; the latter
(`ScudTask.key`) is the id the task gets in Constellation's DAG.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.dag import TaskSpec
from shared.errors import InvalidInput, RaasError

STATUSES = {"P": "pending", "I": "in-progress", "D": "done", "R": "review"}
STATUSES |= {"B": "blocked", "F": "deferred", "C": "cancelled", "X": "expanded", "!": "failed"}
CLOSED = frozenset("DCF")
"""Done, cancelled, deferred: tasks that are not to be run."""
PRIORITIES = {"C": "critical", "H": "high", "M": "medium", "L": "low"}
_ID = re.compile(r"[A-Za-z0-9_.:-]+")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_OPAQUE = {  # sections scud writes for its own coordination; kept and written back, not used
    "roles": "# role_id | name | allow_pattern | deny_pattern",
    "weave": "# id | name | priority | enabled | rule_type | rule_spec",
    "partitions": "# partition_id | scope_pattern | strategy | agent_count",
    "locks": "# lock_key | holder_agent | task_id | acquired_at | ttl_secs",
}
_SECTIONS = ("meta", "nodes", "edges", "parents", "assignments", "agents", *_OPAQUE, "details")
_ESCAPES = {"\\": "\\", "|": "|", "n": "\n"}


def status_code(raw: str) -> str | None:
    """The one-letter code for a status given as a code or a name (`D`, `done`, `in_progress`)."""
    word = raw.strip().lower().replace("_", "-")
    if word.upper() in STATUSES:
        return word.upper()
    return next((code for code, name in STATUSES.items() if name == word), None)


def _priority(raw: str | None) -> str | None:
    if raw is None or not raw.strip():
        return None
    word = raw.strip().lower()
    return PRIORITIES.get(word.upper(), word if word in PRIORITIES.values() else "?")


class ScudTask(BaseModel):
    """One task of a SCUD graph. References (`depends_on`, `parent`, `children`) are ids as
    written: plain for a task of the same phase, `phase:id` for one in another phase."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=rf"^{_ID.pattern}$")
    title: str
    status: str = "P"
    complexity: int | None = None
    priority: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    parent: str | None = None
    children: list[str] = Field(default_factory=list)
    details: dict[str, str] = Field(default_factory=dict)
    phase: str | None = None
    assigned_to: str | None = None
    agent_type: str | None = None
    annotations: str = ""
    """The optional sixth @nodes cell, `key=value` pairs such as `role=reviewer`, as written."""

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str) -> str:
        code = status_code(value)
        if code is None:
            msg = f"unknown status '{value}' (expected one of {', '.join(STATUSES)})"
            raise ValueError(msg)
        return code

    @field_validator("priority")
    @classmethod
    def _known_priority(cls, value: str | None) -> str | None:
        word = _priority(value)
        if word == "?":
            msg = f"unknown priority '{value}' (expected {', '.join(PRIORITIES.values())} or empty)"
            raise ValueError(msg)
        return word

    @property
    def key(self) -> str:
        """The id unique across the file: `phase:id`, or the bare id in an unnamed phase."""
        if self.phase is None or self.id.startswith(f"{self.phase}:"):
            return self.id
        return f"{self.phase}:{self.id}"


class ScudPhase(BaseModel):
    """One phase (tag): the part of the file between `---` separators."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    meta: dict[str, str] = Field(default_factory=dict)
    tasks: list[ScudTask] = Field(default_factory=list)
    behavior_edges: list[str] = Field(default_factory=list)
    """`a ~~ b`, `a >> b`, `a != b` rows of @edges (scud's agent coordination), as written."""
    sections: dict[str, list[str]] = Field(default_factory=dict)
    """Rows of @roles, @weave, @partitions and @locks, as written."""


class ScudGraph(BaseModel):
    """A whole tasks.scg file, phases and tasks in file order."""

    model_config = ConfigDict(extra="forbid")

    phases: list[ScudPhase] = Field(default_factory=list)

    @property
    def meta(self) -> dict[str, str]:
        """The first phase's `@meta` (a single-phase file's only one)."""
        return self.phases[0].meta if self.phases else {}

    @property
    def tasks(self) -> list[ScudTask]:
        return [task for phase in self.phases for task in phase.tasks]


def _resolve(index: Mapping[str, ScudTask], ref: str, phase: str | None) -> ScudTask | None:
    """The task `ref` names when written in `phase`: its own phase first, then any phase."""
    local = index.get(f"{phase}:{ref}") if phase is not None else None
    return local or index.get(ref)


def _split(line: str) -> list[str]:
    """Split a row on `|`, keeping escaped `\\|` and `\\\\` inside their cell, unstripped."""
    cells, current = [], ""
    chars = iter(line)
    for char in chars:
        if char == "\\":
            current += char + next(chars, "")
        elif char == "|":
            cells.append(current)
            current = ""
        else:
            current += char
    return [*cells, current]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")


class _Parser:
    """Reads a file line by line; keeps the line of each task row so write_back can edit it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.phases: list[ScudPhase] = []
        self.rows: dict[str, int] = {}
        self.edges: list[tuple[int, ScudTask, str]] = []
        self.handlers = {
            "meta": self._meta,
            "nodes": self._nodes,
            "edges": self._edges,
            "parents": self._parents,
            "details": self._details,
            "assignments": lambda lineno, text: self._attribute(lineno, text, "assigned_to"),
            "agents": lambda lineno, text: self._attribute(lineno, text, "agent_type"),
            **{name: self._opaque for name in _OPAQUE},
        }
        self._start_phase()

    def error(self, lineno: int, problem: str) -> InvalidInput:
        return InvalidInput(f"{self.source}:{lineno}: {problem}")

    def _start_phase(self) -> None:
        self.phase = ScudPhase()
        self.local: dict[str, ScudTask] = {}
        self.pending_rows: list[tuple[ScudTask, int]] = []
        self.section: str | None = None
        self.name_line = 0
        self.has_content = False
        self.detail: tuple[ScudTask, str, list[str]] | None = None
        self.blanks = 0

    def feed(self, lineno: int, line: str) -> None:
        if self.detail is not None and line.startswith("  "):
            # Continuation first: a value line may look like a comment, a section or `---`.
            task, field, lines = self.detail
            lines += [""] * self.blanks + [line[2:]]
            task.details[field], self.blanks = "\n".join(lines), 0
            return
        text = line.strip()
        if not text:
            self.blanks += 1  # kept only if more of the same details value follows
            return
        self.detail, self.blanks = None, 0
        if text == "---":
            self.end_phase()
        elif text.startswith("#"):
            self._comment(lineno, text)
        elif text.startswith("@"):
            self._section(lineno, text)
        elif self.section == "meta" and text == "}":
            self.section = None
        elif self.section is None:
            raise self.error(
                lineno, f"'{text[:40]}' is outside any section; put it under @nodes, @edges, ..."
            )
        else:
            self.handlers[self.section](lineno, text)
        self.has_content = self.has_content or text != "---"

    def _comment(self, lineno: int, text: str) -> None:
        if self.section is not None or self.phase.tasks:
            return
        body = text.lstrip("#").strip()
        if version := re.fullmatch(r"SCUD Graph (v\d+)", body):
            if version.group(1) != "v1":
                raise self.error(lineno, f"this file is SCUD Graph {version.group(1)}; only v1 can be read")
        elif name := re.fullmatch(r"(?:Phase|Epic):\s*(.*)", body):
            self._name(lineno, name.group(1).strip())

    def _section(self, lineno: int, text: str) -> None:
        name = text[1:].removesuffix("{").strip()
        if name not in _SECTIONS:
            known = ", ".join(f"@{section}" for section in _SECTIONS)
            raise self.error(lineno, f"unknown section '@{name}' (expected one of {known})")
        self.section = name

    def _name(self, lineno: int, name: str) -> None:
        if not _NAME.fullmatch(name):
            raise self.error(lineno, f"phase name '{name}' may use only letters, digits, '_', '.', '-'")
        self.phase.name, self.name_line = name, lineno

    def _meta(self, lineno: int, text: str) -> None:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*:\s*(.*)", text) or re.fullmatch(r"(\S+)\s*(.*)", text)
        assert match is not None  # the second pattern matches any stripped, non-empty line
        key, value = match.group(1), match.group(2).strip()
        if key == "name":
            self._name(lineno, value)
        self.phase.meta[key] = value

    def _task_id(self, lineno: int, task_id: str) -> str:
        if not _ID.fullmatch(task_id):
            raise self.error(lineno, f"task id '{task_id}' may use only letters, digits, '_', '.', ':', '-'")
        return task_id

    def _local(self, lineno: int, ref: str) -> ScudTask:
        prefix = f"{self.phase.name}:" if self.phase.name else ""
        for candidate in (ref, ref.removeprefix(prefix), prefix + ref):
            if candidate in self.local:
                return self.local[candidate]
        where = f" in phase '{self.phase.name}'" if self.phase.name else ""
        raise self.error(lineno, f"no task '{ref}'{where}; list it under @nodes first")

    def _nodes(self, lineno: int, text: str) -> None:
        cells = [cell.strip() for cell in _split(text)]
        if not 2 <= len(cells) <= 6:
            raise self.error(
                lineno, f"a task row is 'id | title | status | complexity | priority', not '{text}'"
            )
        task_id, title, status, complexity, priority, annotations = cells + [""] * (6 - len(cells))
        if self._task_id(lineno, task_id) in self.local:
            raise self.error(lineno, f"task '{task_id}' is defined twice")
        if status_code(status or "P") is None:
            raise self.error(
                lineno, f"unknown status '{status}' for task '{task_id}' (one of {', '.join(STATUSES)})"
            )
        if complexity and not re.fullmatch(r"-?\d+", complexity):
            raise self.error(lineno, f"complexity '{complexity}' of task '{task_id}' is not a whole number")
        if _priority(priority) == "?":
            raise self.error(
                lineno, f"unknown priority '{priority}' for task '{task_id}' (critical/high/medium/low)"
            )
        task = ScudTask(
            id=task_id,
            title=_unescape(title),
            status=status or "P",
            complexity=int(complexity) if complexity else None,
            priority=priority or None,
            annotations=annotations,
        )
        self.local[task_id] = task
        self.phase.tasks.append(task)
        self.pending_rows.append((task, lineno - 1))

    def _edges(self, lineno: int, text: str) -> None:
        if "->" not in text and re.search(r"~~|>>|!=", text):
            self.phase.behavior_edges.append(text)
            return
        sides = [side.strip() for side in text.split("->")]
        if len(sides) != 2 or not all(sides):
            raise self.error(lineno, f"an edge row is 'dependent -> dependency', not '{text}'")
        task = self._local(lineno, sides[0])
        if self._task_id(lineno, sides[1]) not in task.depends_on:
            task.depends_on.append(sides[1])
            self.edges.append((lineno, task, sides[1]))

    def _parents(self, lineno: int, text: str) -> None:
        match = re.fullmatch(r"(\S+?):(?:\s+(.*))?", text) or re.fullmatch(r"([^:\s]+):(.*)", text)
        if match is None:
            raise self.error(lineno, f"a parents row is 'parent: child, child', not '{text}'")
        parent = self._local(lineno, match.group(1))
        for ref in filter(None, (part.strip() for part in (match.group(2) or "").split(","))):
            child = self._local(lineno, ref)
            if child.parent is not None:
                raise self.error(lineno, f"task '{child.id}' already has parent '{child.parent}'")
            ancestor: ScudTask | None = parent
            while ancestor is not None:
                if ancestor is child:
                    raise self.error(lineno, f"task '{child.id}' would be its own ancestor")
                ancestor = self.local.get(ancestor.parent) if ancestor.parent else None
            child.parent = parent.id
            parent.children.append(child.id)

    def _attribute(self, lineno: int, text: str, field: str) -> None:
        cells = [cell.strip() for cell in _split(text)]
        if len(cells) < 2:  # @assignments may carry two legacy cells more, which scud ignores too
            raise self.error(lineno, f"an @{self.section} row is 'id | {field}', not '{text}'")
        setattr(self._local(lineno, cells[0]), field, _unescape(cells[1]) or None)

    def _opaque(self, lineno: int, text: str) -> None:
        assert self.section is not None
        self.phase.sections.setdefault(self.section, []).append(text)

    def _details(self, lineno: int, text: str) -> None:
        cells = _split(text)
        if not 2 <= len(cells) <= 3:
            raise self.error(
                lineno, f"a details row is 'id | field |' then lines indented two spaces, not '{text}'"
            )
        task, field = self._local(lineno, cells[0].strip()), cells[1].strip()
        if not _NAME.fullmatch(field):
            raise self.error(lineno, f"details field '{field}' may use only letters, digits, '_', '.', '-'")
        if field in task.details:
            raise self.error(lineno, f"task '{task.id}' has its '{field}' details twice")
        inline = cells[2].strip() if len(cells) == 3 else ""
        self.detail = (task, field, [inline] if inline else [])
        task.details[field] = inline

    def end_phase(self) -> None:
        if self.has_content:
            if self.phase.name and any(phase.name == self.phase.name for phase in self.phases):
                problem = f"phase '{self.phase.name}' appears twice; merge the two or rename one"
                raise self.error(self.name_line, problem)
            self.phases.append(self.phase)
            for task, row in self.pending_rows:
                task.phase = self.phase.name
                if task.key in self.rows:
                    first = self.rows[task.key] + 1
                    raise self.error(row + 1, f"task '{task.key}' is defined twice (first on line {first})")
                self.rows[task.key] = row
        self._start_phase()

    def finish(self) -> ScudGraph:
        """Resolve every dependency once all phases are read; they may point at later phases."""
        self.end_phase()
        index = {task.key: task for phase in self.phases for task in phase.tasks}
        for lineno, task, ref in self.edges:
            if _resolve(index, ref, task.phase) is None:
                raise self.error(lineno, f"task '{task.id}' depends on unknown task '{ref}'")
        for task in index.values():
            targets = [_resolve(index, ref, task.phase) for ref in task.depends_on]
            refs = [target.id if target.phase == task.phase else target.key for target in targets if target]
            task.depends_on = list(dict.fromkeys(refs))
        return ScudGraph(phases=self.phases)


def _parse(text: str, source: str) -> tuple[ScudGraph, dict[str, int]]:
    parser = _Parser(source)
    for lineno, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        parser.feed(lineno, line.removesuffix("\r"))
    return parser.finish(), parser.rows


def parse_scg(text: str, source: str = "tasks.scg") -> ScudGraph:
    """Parse a SCUD Graph v1 file.

    Raises:
        InvalidInput: `source:LINE: what is wrong` for the first malformed line.
    """
    return _parse(text, source)[0]


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


def to_task_specs(graph: ScudGraph, categories: Collection[str] | None = None) -> list[TaskSpec]:
    """The tasks still to run, as DAG nodes with phase-qualified ids.

    Left out: tasks done, cancelled or deferred (D, C, F) and everything under such a parent;
    parents with children, whose work is their children. Pending, in-progress, review, blocked
    and failed tasks run: their work is not known to be finished. A dependency on a left-out
    task is dropped: done is satisfied, and cancelled or deferred work will not come, so waiting
    on it would stall the project forever. A dependency on a parent becomes one on its children,
    and children inherit their parent's dependencies. Unknown references are kept as they are,
    so `validate_dag` names them.

    Args:
        categories: the agent categories the project defines. A task's SCUD agent type becomes
            its category when it is one of them (or always, when None); otherwise `builder`.
    """
    index = {task.key: task for task in graph.tasks}
    return [
        TaskSpec(
            id=task.key,
            title=task.title,
            description=_description(task, index),
            category=_category(task.agent_type, categories),
            depends_on=_dependencies(task, index),
        )
        for task in graph.tasks
        if not task.children and not _closed(task, index)
    ]


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
    """What depending on `task` means: on itself, on its runnable descendants, or on nothing."""
    if task.key in skip or _closed(task, index):
        return []
    if not task.children:
        return [task.key]
    keys: list[str] = []
    for ref in task.children:
        child = _resolve(index, ref, task.phase)
        keys += _runnable_keys(child, index, skip | {task.key}) if child else []
    return keys


def _description(task: ScudTask, index: Mapping[str, ScudTask]) -> str:
    """The detail fields, description first; a subtask also says what it is part of."""
    parts = [task.details.get("description", "")]
    for field, value in task.details.items():
        if field != "description":
            parts.append(f"## {field.replace('_', ' ').capitalize()}\n{value}")
    parents = _ancestors(task, index)[:1]
    parts += [f"## Part of\n{parent.title}\n\n{_description(parent, index)}".strip() for parent in parents]
    return "\n\n".join(part for part in parts if part.strip())


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
    crash leaves the old file or the new one, never half of one.
    """
    path = path.resolve()  # through a symlink, so the link itself stays a link
    text = path.read_bytes().decode("utf-8")
    graph, rows = _parse(text, str(path))
    lines = text.split("\n")
    for task_id, status in statuses.items():
        task, code = _find(graph, task_id), _code(status)
        task.status = code
        lines[rows[task.key]] = _replace_status(lines[rows[task.key]], code)
    new_text = "\n".join(lines)
    if new_text == text:
        return
    if _parse(new_text, str(path))[0] != graph:  # never write a file that says something else
        msg = f"{path}: could not update statuses in place; the file is left as it was"
        raise RaasError(msg)
    _replace_file(path, new_text.encode("utf-8"))


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
