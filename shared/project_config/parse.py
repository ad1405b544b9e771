"""Reading raas.toml text into a :class:`ProjectConfig`, and saying in one line what is wrong
with it: the key, what was expected and what was given (never a URL, which may carry a secret)."""

from __future__ import annotations

import tomllib
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from shared.errors import InvalidInput
from shared.project_config.environment import ENVIRONMENT_FILE, EnvironmentConfig, NetworkLevel
from shared.project_config.project import ProjectConfig


def describe_validation_error(source: str, error: ValidationError) -> str:
    """One line naming the first bad key, what was wrong and what was given."""
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    where = f"{source}: {loc}: " if loc else f"{source}: "
    given = first.get("input")
    # A URL is never repeated: it may carry a credential.
    hidden = (
        first["type"] == "missing" or isinstance(given, dict) or first["loc"][-1:] in (("remote",), ("repo",))
    )
    shown = "" if hidden else f" (got {given!r})"
    text = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        keys = _keys_at(first["loc"][:-1])
        text = f"unknown key; keys: {', '.join(keys)}" if keys else text
    return f"{where}{text}{shown}"


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``loc`` (a path into raas.toml) may hold, to name them in an error."""
    model: Any = ProjectConfig
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            model = field.annotation if field else None
        else:  # dict[str, X] or list[X]: the key or the index selects an X
            model = get_args(model)[-1] if get_origin(model) in (dict, list) else None
        if get_origin(model) in (Union, UnionType):  # X | None
            model = next((a for a in get_args(model) if a is not type(None)), None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def parse_environment_file(text: str) -> EnvironmentConfig:
    """``.raas/environment.toml`` (the ``[environment]`` table's keys at its top level).

    Raises:
        InvalidInput: naming the file and the bad key.
    """
    try:
        return EnvironmentConfig.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        msg = f"{ENVIRONMENT_FILE}: not valid TOML: {exc}"
        raise InvalidInput(msg) from exc
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(ENVIRONMENT_FILE, exc)) from exc


def full_network_key(env: EnvironmentConfig) -> str | None:
    """``network`` or ``setup_network`` when it asks for the ``full`` network level, else None."""
    return next((k for k in ("network", "setup_network") if getattr(env, k) is NetworkLevel.FULL), None)


def parse_project_config(text: str, source: str = "raas.toml") -> ProjectConfig:
    """Parse and validate raas.toml text.

    Raises:
        InvalidInput: naming the bad key and the expected type.
    """
    if "\x00" in text:
        msg = f"{source}: contains a NUL byte; it must be plain text"
        raise InvalidInput(msg)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{source}: not valid TOML: {exc}"
        raise InvalidInput(msg) from exc
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(source, exc)) from exc
    except InvalidInput as exc:  # the task graph's own one-line messages
        msg = f"{source}: {exc}"
        raise InvalidInput(msg) from exc
