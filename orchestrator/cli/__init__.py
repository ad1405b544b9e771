"""The ``raas`` command line: a thin edge that parses, calls the core or the API, and formats.

Errors from the core come back as one line on stderr and a non-zero exit code. Commands live in
the modules of this package, grouped by what they act on, and register themselves on ``app``.

A composition root, the top layer: it may import every package of ``orchestrator``, ``workers``
(``raas worker``, ``raas scripted-model``) and ``shared``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from orchestrator.cli.exit_codes import ExitCode
from shared.errors import RaasError, one_line
from shared.settings import get_settings

app = typer.Typer(name="raas", help="Constellation: Ralph-as-a-Service.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

# The panels ``raas --help`` groups its commands in.
PROJECTS = "Projects"
INSPECT = "Inspect"
SERVICES = "Services"
ADMIN = "Admin"

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def api() -> Any:
    """The coordinator's client, from RAAS_COORDINATOR_URL and RAAS_API_TOKEN; closed when the
    command ends (see :func:`_closes_clients`)."""
    from orchestrator.cli.client import ApiClient

    settings = get_settings()
    client = ApiClient(settings.coordinator_url, settings.api_token.get_secret_value())
    _OPEN.append(client)
    return client


# The clients the running command made. A process that runs many commands (a test's CliRunner,
# a program embedding the CLI) would otherwise keep each command's connections open until the
# garbage collector finds them, and warn of unclosed sockets wherever it then happens to run.
_OPEN: list[Any] = []


@app.callback()
def _closes_clients(context: typer.Context) -> None:
    # Every command's root context: its clients are closed when it closes (also on an error).
    context.call_on_close(_close_clients)


def _close_clients() -> None:
    while _OPEN:
        _OPEN.pop().close()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def main() -> None:
    try:
        app()
    except RaasError as exc:
        # One line, never wrapped: scripts and tests read it.
        sys.stderr.write("error: " + one_line(exc) + "\n")
        sys.exit(ExitCode.ERROR)


# Registered last: the command modules import what is defined above. Their order is the order
# of the help's panels (projects, inspect, services, admin).
# isort: off
from orchestrator.cli import projects  # noqa: E402, F401
from orchestrator.cli import transcripts  # noqa: E402, F401
from orchestrator.cli import servers  # noqa: E402, F401
from orchestrator.cli import mcp_stdio  # noqa: E402, F401
from orchestrator.cli import ops  # noqa: E402, F401
from orchestrator.cli import credentials  # noqa: E402, F401
from orchestrator.cli import team  # noqa: E402, F401
from orchestrator.cli import notify  # noqa: E402, F401
from orchestrator.cli import triggers  # noqa: E402, F401
from orchestrator.cli import evals  # noqa: E402, F401
from orchestrator.cli import pull_requests  # noqa: E402, F401
from orchestrator.cli import workspaces  # noqa: E402, F401
# isort: on
