"""The Jinja2 environment: every template autoescaped, whatever its name (what agents write is
shown as text: DESIGN.md rule 11)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from orchestrator.dashboard import assets

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _usd(value: Decimal | float | None) -> str:
    return "—" if value is None else f"${Decimal(value):,.4f}"


def _age(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    stamp = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    seconds = int((datetime.now(UTC) - stamp).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _percent(part: Decimal | float, whole: Decimal | float) -> float:
    return 0.0 if not whole else min(100.0, float(part) * 100 / float(whole))


@cache
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, not only *.html: nothing is rendered unescaped
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["static"] = assets.static_url
    env.filters["usd"] = _usd
    env.filters["age"] = _age
    env.filters["percent"] = _percent
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
