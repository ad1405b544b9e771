"""The configuration reference in the README, generated from the models so it cannot drift.

``python -m shared.config_reference`` prints the two tables (``--write README.md`` puts them in
place); a unit test checks the README holds exactly what this prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from shared.categories import CategoryConfig, Role
from shared.harnesses import HARNESSES, HarnessConfig
from shared.project_config import ProjectConfig
from shared.settings import Settings

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None:
        return "(none)"
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~", 1)
    if isinstance(value, bool | list | dict | str):
        return f"`{json.dumps(value)}`"
    return f"`{value!s}`"


def _describe(field: FieldInfo) -> str:
    return " ".join((field.description or "").split()).replace("|", "\\|")


def _model_rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += _model_rows(annotation, f"{prefix}[{name}] ")
            continue
        rows.append(f"| `{prefix}{name}` | {_default(field)} | {_describe(field)} |")
    return rows


def _env_name(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    return str(choices[0]) if choices else f"RAAS_{name.upper()}"


def _category_keys() -> str:
    keys = ", ".join(f"`{name}`" for name in CategoryConfig.model_fields)
    roles = ", ".join(f"`{role.value}`" for role in Role)
    what = f"`role` is one of {roles}: what the engine does with the agents"
    return f"`[categories.NAME]` tables have {keys} ({what})"


_CATEGORY_KEYS = _category_keys()


def _harness_keys() -> str:
    names = ", ".join(f"`{name}`" for name in HARNESSES)
    keys = ", ".join(f"`{name}`" for name in HarnessConfig.model_fields)
    described = "; ".join(
        f"`{name}`: {_describe(field)}" for name, field in HarnessConfig.model_fields.items()
    )
    return f"`[harnesses.NAME]` tables (NAME one of {names}) have {keys} ({described})"


def environment_table() -> str:
    rows = [
        f"| `{_env_name(name, field)}` | {_default(field)} | {_describe(field)} |"
        for name, field in Settings.model_fields.items()
    ]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])


def raas_toml_table() -> str:
    return "\n".join(["| key | default | meaning |", "|---|---|---|", *_model_rows(ProjectConfig)])


def reference() -> str:
    return "\n".join(
        [
            BEGIN,
            "### Environment (service settings)",
            "",
            environment_table(),
            "",
            "### raas.toml (per project)",
            "",
            "Tables are written `[name]`; `[[tasks]]` entries have `id`, `title`, `description`, "
            "`category`, `depends_on` and `kind` (`work`; `group`: no agent works it, it completes "
            "when its dependencies have; `approval`: it waits for a person, as `[approvals]` says); "
            f"{_CATEGORY_KEYS}; {_harness_keys()}; `[pricing.MODEL]` is a keyed table.",
            "",
            raas_toml_table(),
            END,
        ]
    )


def rewrite(readme: Path) -> None:
    """Replace the reference between the markers in ``readme``."""
    text = readme.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    readme.write_text(text[:start] + reference() + text[stop:], encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        rewrite(Path(sys.argv[2]))
    else:
        print(reference())
