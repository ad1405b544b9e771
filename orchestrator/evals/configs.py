"""Eval configurations: raas.toml fragments (harness, model, workflow, categories, limits), and
the raas.toml each attempt's project is made with.

An attempt's raas.toml is the fragment with three things laid over it: the task's
``[environment]`` (unless the fragment sets one), the task's time limit as the circuit breaker's
wall clock (unless the fragment sets one) and the attempt's cap as ``[budget] limit_usd`` — the
smallest of the task's ``budget_usd``, the run's per-attempt cap and the fragment's own limit.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shared.errors import InvalidInput
from shared.project_config import ProjectConfig, describe_validation_error

CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class EvalConfig:
    name: str
    toml: str

    @property
    def data(self) -> dict[str, Any]:
        return tomllib.loads(self.toml)


def parse_config(name: str, text: str) -> EvalConfig:
    """A configuration named ``name`` from its TOML text, checked as a raas.toml would be.

    Raises:
        InvalidInput: the name is not ``[A-Za-z0-9._-]``, the text is not TOML, or a key is not
            one raas.toml has (or has the wrong type).
    """
    if not CONFIG_NAME.match(name):
        msg = f"config {name!r}: its name (the file's stem) must be letters, digits, '.', '_' or '-'"
        raise InvalidInput(msg)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"config {name}: not valid TOML: {exc}"
        raise InvalidInput(msg) from exc
    try:
        ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(f"config {name}", exc)) from None
    except InvalidInput as exc:
        msg = f"config {name}: {exc}"
        raise InvalidInput(msg) from exc
    return EvalConfig(name, text)


def read_configs(paths: list[Path]) -> list[EvalConfig]:
    """The configurations in ``paths``, each named by its file's stem.

    Raises:
        InvalidInput: none given, a file that cannot be read or does not parse, two with one name.
    """
    if not paths:
        msg = "no --config given; give at least one raas.toml fragment (e.g. --config sonnet.toml)"
        raise InvalidInput(msg)
    configs: dict[str, EvalConfig] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"config {path}: cannot read it ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
            raise InvalidInput(msg) from exc
        config = parse_config(path.stem, text)
        if config.name in configs:
            msg = f"two configs are named {config.name!r} (the file's stem); rename one"
            raise InvalidInput(msg)
        configs[config.name] = config
    return list(configs.values())


def attempt_cap(task: dict[str, Any], config: EvalConfig, attempt_budget: Decimal | None) -> Decimal:
    """The attempt's spending cap: the smallest limit that applies to it."""
    caps = [Decimal(str(task["budget_usd"]))]
    if attempt_budget is not None:
        caps.append(attempt_budget)
    given = config.data.get("budget", {}).get("limit_usd")
    if given is not None:
        caps.append(Decimal(str(given)))
    return min(caps)


def attempt_config(task: dict[str, Any], config: EvalConfig, cap: Decimal, name: str) -> dict[str, Any]:
    """The attempt's raas.toml as data (see the module's docstring for what is laid over)."""
    data = config.data
    data["name"] = name
    if task.get("environment") and "environment" not in data:
        data["environment"] = task["environment"]
    breaker = dict(data.get("circuit_breaker", {}))
    breaker.setdefault("timeout_s", float(task["time_limit_s"]))
    data["circuit_breaker"] = breaker
    data["budget"] = {**data.get("budget", {}), "limit_usd": cap}
    return data


def to_toml(data: dict[str, Any]) -> str:
    """``data`` as TOML: one line per top-level key, tables inline (enough for raas.toml)."""
    return "".join(f"{json.dumps(key)} = {_value(value)}\n" for key, value in data.items())


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Decimal):
        return str(value) if "." in str(value) or "E" in str(value) else f"{value}.0"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON-escaped text
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items()) + "}"
    msg = f"cannot write {type(value).__name__} as TOML"
    raise TypeError(msg)
