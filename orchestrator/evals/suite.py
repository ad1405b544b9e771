"""An eval suite on disk: a directory of tasks in the Terminal-Bench/Harbor shape.

```
<suite>/suite.toml                  [suite] name, description
<suite>/<task-id>/task.toml         [task] difficulty, tags, time_limit_s, budget_usd; [environment]
<suite>/<task-id>/instruction.md    becomes PROMPT.md
<suite>/<task-id>/workspace/        the unsolved starting tree
<suite>/<task-id>/tests/test.sh     exit 0 = resolved; never visible to the agent
<suite>/<task-id>/solution/solve.sh optional oracle
```

A task is any folder holding ``task.toml`` (tasks may be grouped in sub-folders); its id is the
folder's name, unique in the suite. :func:`load_suite` checks all of it before anything starts:
one line naming the first thing wrong and what to do.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import InvalidInput
from shared.project_config import describe_validation_error
from shared.project_config.environment import EnvironmentConfig

SUITE_FILE = "suite.toml"
TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
TEST_SCRIPT = "tests/test.sh"
# Folders of a task that are never searched for further tasks.
TASK_PARTS = ("workspace", "tests", "solution")
TASK_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SuiteMeta(_Strict):
    name: str = Field(min_length=1, max_length=100)
    description: str = ""


class TaskMeta(_Strict):
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    tags: list[str] = Field(default_factory=list)
    time_limit_s: float = Field(default=600.0, gt=0, le=86_400)
    budget_usd: Decimal = Field(default=Decimal("0.50"), gt=0, le=Decimal(10_000))


class _SuiteFile(_Strict):
    suite: SuiteMeta


class _TaskFile(_Strict):
    task: TaskMeta = Field(default_factory=TaskMeta)
    environment: EnvironmentConfig | None = None


@dataclass(frozen=True)
class SuiteTask:
    key: str
    path: Path
    meta: TaskMeta
    environment: EnvironmentConfig | None
    instruction: str

    def describe(self, root: Path) -> dict[str, Any]:
        """The task as the run's row keeps it (``EvalRun.tasks``); ``path`` is relative to the suite."""
        environment = (
            self.environment.model_dump(mode="json", exclude_defaults=True) if self.environment else None
        )
        return {
            "id": self.key,
            "path": self.path.relative_to(root).as_posix(),
            "difficulty": self.meta.difficulty,
            "tags": self.meta.tags,
            "time_limit_s": self.meta.time_limit_s,
            "budget_usd": str(self.meta.budget_usd),
            "environment": environment,
        }


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    root: Path
    tasks: tuple[SuiteTask, ...]
    digest: str


def _toml(path: Path, root: Path) -> dict[str, Any]:
    where = path.relative_to(root.parent).as_posix()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{where}: cannot read it ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
        raise InvalidInput(msg) from exc
    except tomllib.TOMLDecodeError as exc:
        msg = f"{where}: not valid TOML: {exc}"
        raise InvalidInput(msg) from exc


def _task_dirs(root: Path) -> list[Path]:
    found: list[Path] = []
    for task_file in sorted(root.rglob(TASK_FILE)):
        rel = task_file.parent.relative_to(root).parts
        # A task's own folders hold its files, not further tasks.
        if any(part in TASK_PARTS or part.startswith(".") for part in rel[1:]) or not rel:
            continue
        found.append(task_file.parent)
    return found


def _load_task(directory: Path, root: Path) -> SuiteTask:
    where = directory.relative_to(root.parent).as_posix()
    key = directory.name
    if not TASK_ID.match(key):
        msg = f"{where}: task id {key!r} must be lowercase letters, digits and '-'; rename the folder"
        raise InvalidInput(msg)
    try:
        parsed = _TaskFile.model_validate(_toml(directory / TASK_FILE, root))
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(f"{where}/{TASK_FILE}", exc)) from None
    for required, what in (
        (TEST_SCRIPT, "the hidden test that decides success"),
        (INSTRUCTION_FILE, "the prompt"),
    ):
        if not (directory / required).is_file():
            msg = f"{where}: no {required} ({what}); add it"
            raise InvalidInput(msg)
    if not (directory / "workspace").is_dir():
        msg = f"{where}: no workspace/ folder (the unsolved starting tree); add it, even empty"
        raise InvalidInput(msg)
    instruction = (directory / INSTRUCTION_FILE).read_text(encoding="utf-8")
    if not instruction.strip():
        msg = f"{where}/{INSTRUCTION_FILE} is empty; say what the agent must do"
        raise InvalidInput(msg)
    return SuiteTask(key, directory, parsed.task, parsed.environment, instruction)


def digest_of(root: Path) -> str:
    """sha256 over every file's relative path and bytes, in path order: the suite's identity."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def load_suite(root: Path) -> Suite:
    """The suite at ``root``, every task checked.

    Raises:
        InvalidInput: no suite.toml, a file that does not parse, a task without tests/test.sh,
            instruction.md or workspace/, a task id that is not ``[a-z0-9-]``, two tasks with one
            id, or no task at all.
    """
    root = root.absolute()
    if not (root / SUITE_FILE).is_file():
        msg = f"{root}: no {SUITE_FILE}; a suite is a folder with {SUITE_FILE} ([suite] name) and tasks"
        raise InvalidInput(msg)
    try:
        meta = _SuiteFile.model_validate(_toml(root / SUITE_FILE, root)).suite
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(f"{root.name}/{SUITE_FILE}", exc)) from None
    tasks: dict[str, SuiteTask] = {}
    for directory in _task_dirs(root):
        task = _load_task(directory, root)
        if task.key in tasks:
            first = tasks[task.key].path.relative_to(root).as_posix()
            msg = (
                f"{root.name}: duplicate task id {task.key!r} ({first} and "
                f"{directory.relative_to(root).as_posix()}); task ids are folder names and must be unique"
            )
            raise InvalidInput(msg)
        tasks[task.key] = task
    if not tasks:
        msg = f"{root.name}: no tasks (folders holding {TASK_FILE}); add one"
        raise InvalidInput(msg)
    return Suite(meta.name, meta.description, root, tuple(tasks.values()), digest_of(root))
