"""``raas init DIR``: a new project directory with a commented PROMPT.md and raas.toml.

The raas.toml is generated from :class:`shared.project_config.ProjectConfig`, so it lists every
key there is, with its default and its description, and never drifts from what is accepted.
Every key is commented out: uncommenting a line gives its default, a valid setting; a key with
no default shows a ``<placeholder>`` to replace.
"""

from __future__ import annotations

import json
import textwrap
import types
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from shared.errors import InvalidInput
from shared.pricing import ModelPrice
from shared.project_config import ProjectConfig

WIDTH = 96
EXAMPLE_MODEL = "claude-sonnet-4-6"
# The example key shown for a table of tables; others get NAME.
DICT_EXAMPLE_KEYS = {"pricing": f'"{EXAMPLE_MODEL}"', "categories": "builder", "harnesses": "claude-code"}

PROMPT_TEMPLATE = """\
<!--
  PROMPT.md: the agent reads this file, unchanged, at the start of every iteration, with fresh
  context each time (a Ralph loop). What it remembers between iterations is what it wrote in the
  workspace: code, notes, plans, git history. Write what "done" means, so it can tell.
  This comment is sent to the model too; delete it once you have written your own instructions.
-->
# Task

Describe what to build or change here, with the details that matter: the language, the files,
the commands that must pass.

# How to work

1. Read `NOTES.md` if it exists: what earlier iterations did and what is left.
2. Pick the single most important thing still to do, and do it.
3. Check it: run the tests or the program, and fix what fails.
4. Update `NOTES.md`: what you did, what you learned, what is next.

# When you are done

When everything above is done and checked, call `task_complete` with a one-line summary.
Do not call it before.
"""


def init_project(directory: Path) -> list[Path]:
    """Create ``directory`` with PROMPT.md and raas.toml; return the files written.

    Raises:
        InvalidInput: ``directory`` is a file or a directory that is not empty (nothing is written).
    """
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        what = "is not a directory" if not directory.is_dir() else "exists and is not empty"
        msg = f"{directory} {what}; pick a new directory for the project"
        raise InvalidInput(msg)
    files = {
        directory / "PROMPT.md": PROMPT_TEMPLATE,
        directory / "raas.toml": config_template(directory.resolve().name),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return list(files)


def config_template(name: str) -> str:
    """raas.toml listing every key of ProjectConfig, commented out, with defaults and descriptions."""
    lines = [
        "# raas.toml: this project's settings. Every key is optional and commented out here:",
        "# the value shown is the default. Uncomment a line to change it.",
        "",
    ]
    lines += _table(ProjectConfig, [], {"name": name})
    return "\n".join(lines).rstrip() + "\n"


def _table(model: type[BaseModel], path: list[str], examples: dict[str, Any]) -> list[str]:
    """Plain keys first, then sub-tables: TOML needs a table's keys before its sub-tables."""
    lines: list[str] = []
    nested: list[tuple[str, FieldInfo, str, type[BaseModel]]] = []
    for key, field in model.model_fields.items():
        tables = _nested(field.annotation)
        if tables is not None:
            nested.append((key, field, *tables))
            continue
        lines += _comment(" ".join(filter(None, [field.description, _choices(field.annotation)])))
        lines.append(f"# {key} = {_value_of(key, field, examples)}")
        lines.append("")
    for key, field, shape, sub in nested:
        name = ".".join([*path, key])
        description = field.description or _first_line(sub.__doc__).replace("``", "")
        if shape == "table":
            lines += [f"# [{name}]", *_comment(description)]
            lines += _table(sub, [*path, key], {})
        elif shape == "dict":
            example = DICT_EXAMPLE_KEYS.get(key, "NAME")
            lines += [f"# [{name}.{example}]", *_comment(f"{description} One table each, like this one.")]
            lines += _table(sub, [*path, key, example], _price_example(sub))
        else:
            lines += [f"# [[{name}]]", *_comment(f"{description} One [[{name}]] table each.")]
            lines += _table(sub, [*path, key], {})
    return lines


def _value_of(key: str, field: FieldInfo, examples: dict[str, Any]) -> str:
    if key in examples:
        return _toml(examples[key])
    if field.is_required():
        return f"{_placeholder(field.annotation)}  # required"
    default = field.get_default(call_default_factory=True)
    if default is None:  # TOML has no null: the key is simply absent by default
        return f"{_placeholder(field.annotation)}  # unset by default"
    return _toml(default)


def _placeholder(annotation: Any) -> str:
    if _accepts(annotation, str):
        return "<text>"
    if any(_accepts(annotation, kind) for kind in (int, float, Decimal)):
        return "<number>"
    return "<value>"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON-escaped text
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, BaseModel):
        return _toml(value.model_dump())
    return json.dumps(str(value.value if hasattr(value, "value") else value))


def _price_example(model: type[BaseModel]) -> dict[str, Any]:
    if model is not ModelPrice:
        return {}
    from shared.pricing import DEFAULT_PRICES

    return DEFAULT_PRICES[EXAMPLE_MODEL].model_dump(exclude_none=True)


def _nested(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("table" | "dict" | "list", the model) when the field is written as TOML tables."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table", annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    item = args[-1] if args else None
    if origin in (dict, list) and isinstance(item, type) and issubclass(item, BaseModel):
        return ("dict" if origin is dict else "list"), item
    return None


def _accepts(annotation: Any, kind: type) -> bool:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return kind in typing.get_args(annotation)
    return annotation is kind


def _choices(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "One of: " + ", ".join(_toml(value) for value in typing.get_args(annotation)) + "."
    return ""


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(" ".join(text.split()), WIDTH - 2)]


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0]
