"""``raas run``'s live view draws the project as it is in the database, not as it was submitted."""

from __future__ import annotations

import io
import tomllib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.embedded.live import RunView
from orchestrator.scheduling import lifecycle
from shared.project_config import ProjectConfig
from tests.support.engine import Engine, engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SCRIPT = {"responses": [{"content": [{"type": "text", "text": "thinking"}]}], "when_exhausted": "repeat_last"}
TOML = "[budget]\nlimit_usd = 1.0\n"


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(SCRIPT, tmp_path) as running:
        yield running


def test_the_live_views_budget_bar_follows_a_budget_changed_while_it_runs(eng: Engine) -> None:
    # Given a project submitted with a $1 budget, drawn by the live view of `raas run`
    project_id = eng.submit(raas_toml=TOML)
    terminal = Console(file=io.StringIO(), force_terminal=True, width=160)
    view = RunView(
        terminal, live=True, sandbox="docker", config=ProjectConfig.model_validate(tomllib.loads(TOML))
    )

    # When its budget is raised to $5 (`raas budget`, the dashboard's action) while it is shown
    with view.showing(project_id):
        lifecycle.set_budget(project_id, Decimal(5), eng.dispatcher, view)

    # Then the last frame (the one left on screen) draws the bar against the new limit
    screen = Console(file=io.StringIO(), width=160, record=True)
    screen.print(view.render())
    assert "cost $0.0000 of $5.00" in screen.export_text()
