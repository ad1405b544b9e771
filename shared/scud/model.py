"""The graph as data: tasks, phases, the whole file, and the status and priority codes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

STATUSES = {"P": "pending", "I": "in-progress", "D": "done", "R": "review"}
STATUSES |= {"B": "blocked", "F": "deferred", "C": "cancelled", "X": "expanded", "!": "failed"}
CLOSED = frozenset("DCF")
"""Done, cancelled, deferred: tasks that are not to be run."""
PRIORITIES = {"C": "critical", "H": "high", "M": "medium", "L": "low"}
DONE, CANCELLED = "D", "C"
_ID = re.compile(r"[A-Za-z0-9_.:-]+")


def status_code(raw: str) -> str | None:
    """The one-letter code for a status given as a code or a name (`D`, `done`, `in_progress`)."""
    word = raw.strip().lower().replace("_", "-")
    if word.upper() in STATUSES:
        return word.upper()
    return next((code for code, name in STATUSES.items() if name == word), None)


def parent_done(child_statuses: Iterable[str]) -> bool:
    """Whether a parent task is done, given its children's status codes: each one not cancelled
    is done, and there is one (a parent whose children were all cancelled was not done)."""
    live = [code for code in child_statuses if code != CANCELLED]
    return bool(live) and all(code == DONE for code in live)


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
