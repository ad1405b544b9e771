"""`raas init`'s raas.toml is generated from ProjectConfig: every key, its default, its meaning."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.cli.scaffold import config_template, init_project
from shared.errors import InvalidInput
from shared.project_config import ProjectConfig, parse_project_config

pytestmark = [pytest.mark.unit]


def _leaf_keys(model: type[BaseModel]) -> set[str]:
    """Every key a raas.toml can set, tables of tables and arrays of tables included."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        args = typing.get_args(annotation)
        item = args[-1] if typing.get_origin(annotation) in (dict, list) and args else annotation
        if isinstance(item, type) and issubclass(item, BaseModel):
            keys |= _leaf_keys(item)
        else:
            keys.add(name)
    return keys


def _uncomment_plain_tables(text: str) -> str:
    """Uncomment every example line of the top level and of plain [tables], with a value."""
    lines: list[str] = []
    keep = True
    for line in text.splitlines():
        body = line.removeprefix("# ")
        if body.startswith("["):
            keep = not body.startswith("[[") and "." not in body
            if keep:
                lines.append(body)
        elif keep and " = " in body and "<" not in body and body.split(" = ")[0].isidentifier():
            lines.append(body)
    return "\n".join(lines) + "\n"


def test_template_lists_every_key_of_the_project_config() -> None:
    text = config_template("demo")
    for key in _leaf_keys(ProjectConfig):
        assert f"\n# {key} = " in text, key


def test_template_as_written_is_the_defaults() -> None:
    assert parse_project_config(config_template("demo")) == ProjectConfig()


def test_uncommented_defaults_parse_to_the_same_settings() -> None:
    uncommented = parse_project_config(_uncomment_plain_tables(config_template("demo")))
    expected: dict[str, Any] = ProjectConfig().model_dump()
    assert uncommented.model_dump() == {**expected, "name": "demo"}


def test_every_key_has_its_description_above_it() -> None:
    lines = config_template("demo").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("# ") and " = " in line and line[2:].split(" = ")[0].isidentifier():
            assert lines[index - 1].startswith("# "), line


def test_init_refuses_a_non_empty_directory_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(InvalidInput, match="not empty"):
        init_project(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_init_accepts_an_empty_directory(tmp_path: Path) -> None:
    written = init_project(tmp_path)
    assert sorted(p.name for p in written) == ["PROMPT.md", "raas.toml"]


def test_the_harness_choice_and_its_table_are_documented_and_valid_uncommented() -> None:
    text = config_template("demo")
    start = text.index("\n# [harnesses.claude-code]\n")
    end = re.compile(r"\n# \[[a-z_.-]+\]\n").search(text, start + 1)
    block = text[start : end.start() if end else None].splitlines()
    header, example = re.compile(r"# \[[a-z_.-]+\]"), re.compile(r"# [a-z_]+ = \[")
    table = [line.removeprefix("# ") for line in block if header.fullmatch(line) or example.match(line)]

    config = parse_project_config('harness = "claude-code"\n' + "\n".join(table) + "\n")

    assert '\n# harness = "api"\n' in text
    assert table == ["[harnesses.claude-code]", "args = []"]
    assert config.harness_for("builder") == "claude-code"
    assert config.harnesses["claude-code"].args == []
