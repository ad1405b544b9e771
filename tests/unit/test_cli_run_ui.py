"""`raas run DIR --ui [PORT]`: the port after --ui is optional (typer cannot declare that, so
the run command completes a bare --ui with the default port before click parses)."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup

from orchestrator.cli import app
from orchestrator.cli.servers import UI_PORT

pytestmark = pytest.mark.unit


def _parsed(*args: str) -> dict[str, object]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    run = group.commands["run"]
    with run.make_context("run", list(args)) as ctx:
        return {name: ctx.params[name] for name in ("directory", "sandbox", "ui")}


@pytest.mark.parametrize(
    ("args", "ui", "sandbox"),
    [
        (("proj",), None, None),
        (("proj", "--ui"), UI_PORT, None),
        (("proj", "--ui", "9000"), 9000, None),
        (("proj", "--ui", "0", "--sandbox", "local"), 0, "local"),
        (("proj", "--ui", "--sandbox", "local"), UI_PORT, "local"),
        (("--ui", "proj"), UI_PORT, None),
        (("proj", "--ui=9001"), 9001, None),
    ],
)
def test_ui_takes_an_optional_port(args: tuple[str, ...], ui: int | None, sandbox: str | None) -> None:
    parsed = _parsed(*args)
    assert (str(parsed["directory"]), parsed["ui"], parsed["sandbox"]) == ("proj", ui, sandbox)


def test_a_port_out_of_range_is_refused() -> None:
    with pytest.raises(typer.BadParameter, match="65535"):
        _parsed("proj", "--ui", "70000")
