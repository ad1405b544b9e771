"""Parse a tasks.scg file, keeping the line of each task row so write_back can edit it."""

from __future__ import annotations

import re

from shared.errors import InvalidInput
from shared.scud.model import _ID, STATUSES, ScudGraph, ScudPhase, ScudTask, _priority, _resolve, status_code
from shared.scud.syntax import _OPAQUE, _split, _unescape

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SECTIONS = ("meta", "nodes", "edges", "parents", "assignments", "agents", *_OPAQUE, "details")


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
