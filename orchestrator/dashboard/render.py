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


def _duration(seconds: float | None) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``: the one spelling of a duration (the page's JS agrees)."""
    if seconds is None:
        return "—"
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def _took(item: Any) -> str:
    """How long a project (anything with started_at and finished_at) ran, so far if running."""
    started, finished = getattr(item, "started_at", None), getattr(item, "finished_at", None)
    if started is None:
        return "—"
    end = finished or datetime.now(UTC)
    start = started if started.tzinfo else started.replace(tzinfo=UTC)
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    return _duration((end - start).total_seconds())


def _reason(item: Any) -> str:
    """The words of why a project is paused, failed or stopped, without its code (shown beside
    them as a badge): said once, even by words that begin with the code."""
    words = getattr(item, "status_reason", None) or ""
    code = getattr(item, "pause_reason", None)
    if words and code is not None and words.startswith(code.value):
        words = words[len(code.value) :].lstrip(" :")
    return words


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
    env.filters["duration"] = _duration
    env.filters["took"] = _took
    env.filters["reason"] = _reason
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
