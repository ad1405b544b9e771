"""Commands that run things on this machine: the services, an embedded run, set-up."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from orchestrator.cli import ADMIN, PROJECTS, SERVICES, app, err
from orchestrator.cli.exit_codes import ExitCode
from shared.settings import get_settings

UI_PORT = 8701


class OptionalUiPort(TyperCommand):
    """``raas run``'s ``--ui [PORT]``: a ``--ui`` with no port after it gets the default one.

    Typer cannot declare an option whose value is optional (it refuses click's ``flag_value``),
    so a bare ``--ui`` is completed here before the arguments are parsed.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        completed: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":
                completed.extend(args[index:])
                break
            completed.append(arg)
            following = args[index + 1] if index + 1 < len(args) else ""
            if arg == "--ui" and not following.isdigit():
                completed.append(str(UI_PORT))
        return super().parse_args(ctx, completed)


@app.command(rich_help_panel=PROJECTS, cls=OptionalUiPort)
def run(
    directory: Annotated[Path, typer.Argument(help="Project directory with PROMPT.md (and raas.toml).")],
    sandbox: Annotated[
        str | None, typer.Option(help="auto, docker or local (default RAAS_SANDBOX, else auto).")
    ] = None,
    ui: Annotated[
        int | None,
        typer.Option(
            "--ui",
            min=0,
            max=65535,
            metavar="[PORT]",
            help=f"Serve the web dashboard on 127.0.0.1:PORT while it runs (default {UI_PORT}, 0: any).",
        ),
    ] = None,
) -> None:
    """Run a project to its end on this machine, no servers: SQLite, an in-process worker.

    Exits 0 when it completed, 1 when it failed or was stopped, 2 when it paused (the last
    line says why), 130 on Ctrl-C and 143 on SIGTERM (after stopping the project).
    """
    from orchestrator.embedded.run import Terminated, run_directory

    try:
        status = run_directory(directory, sandbox, ui)
    except Terminated:
        raise typer.Exit(ExitCode.TERMINATED) from None
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    raise typer.Exit(ExitCode.for_status(status))


@app.command(rich_help_panel=PROJECTS)
def init(directory: Annotated[Path, typer.Argument(help="The new project directory.")]) -> None:
    """Create a project directory with a commented PROMPT.md and raas.toml."""
    from orchestrator.cli.scaffold import init_project

    for path in init_project(directory):
        sys.stdout.write(f"wrote {path}\n")


@app.command(rich_help_panel=SERVICES)
def coordinator(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8700,
    adopt_secret_key: Annotated[
        bool,
        typer.Option(
            help="Record this replica's RAAS_SECRET_KEY as the one every coordinator of the database must "
            "have (after changing it on all of them); else a replica with another key refuses to start."
        ),
    ] = False,
) -> None:
    """Run the coordinator (one replica of any number): the HTTP API and the scheduler."""
    from orchestrator.service.server import run_coordinator

    run_coordinator(host, port, adopt_secret_key=adopt_secret_key)


@app.command(rich_help_panel=SERVICES)
def worker(
    concurrency: Annotated[int, typer.Option(help="Iterations run at once.")] = 2,
    name: Annotated[
        str | None, typer.Option(help="Celery node name (default RAAS_WORKER_NAME, else iterations@HOST).")
    ] = None,
    pool: Annotated[
        str,
        typer.Option(
            help="threads: the iterations as threads of one process; prefork: a process per iteration."
        ),
    ] = "threads",
    harnesses: Annotated[
        str | None,
        typer.Option(
            help="Agent CLIs it must be able to run, comma-separated (e.g. claude-code,codex); it refuses "
            "to start if one's pinned binary is missing (default RAAS_WORKER_HARNESSES)."
        ),
    ] = None,
) -> None:
    """Run a worker on the iterations queue."""
    from workers.main import run_worker

    required = None if harnesses is None else [h.strip() for h in harnesses.split(",") if h.strip()]
    run_worker(concurrency, name, pool, required)


@app.command("scripted-model", rich_help_panel=SERVICES)
def scripted_model(
    script: Annotated[Path, typer.Option(help="Script file (JSON).", exists=True, dir_okay=False)],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    log: Annotated[Path | None, typer.Option(help="Append every request as a JSON line here.")] = None,
    unix: Annotated[
        Path | None, typer.Option(help="Also listen on this unix socket (e.g. for ANTHROPIC_UNIX_SOCKET).")
    ] = None,
) -> None:
    """Serve the scripted model: the Anthropic Messages and OpenAI Responses APIs answered from a script."""
    from workers.scripted_model.server import serve

    serve(script, host=host, port=port, log_path=log, unix_path=unix)


@app.command(rich_help_panel=ADMIN)
def migrate(
    url: Annotated[str | None, typer.Option(help="Database URL (default RAAS_DATABASE_URL).")] = None,
) -> None:
    """Create or upgrade the database schema."""
    from shared.migrate import upgrade

    upgrade(url or get_settings().database_url)
    err.print("database is up to date")


tenant_app = typer.Typer(help="Tenants and their tokens (run where the coordinator's database is).")
app.add_typer(tenant_app, name="tenant", rich_help_panel=ADMIN)


@tenant_app.command("add")
def tenant_add(
    name: Annotated[str, typer.Argument(help="The tenant's name.")],
    submissions_per_hour: Annotated[int, typer.Option(help="Projects it may submit per hour.")] = 60,
) -> None:
    """Create a tenant and print its first token (shown once; only its hash is stored)."""
    from orchestrator.api.tenants import create_tenant

    tenant_id, token = create_tenant(name, submissions_per_hour)
    err.print(f"tenant {name} ({tenant_id}); its token, shown once:", highlight=False)
    sys.stdout.write(token + "\n")


@tenant_app.command("token")
def tenant_token(name: Annotated[str, typer.Argument(help="The tenant's name.")]) -> None:
    """Print a new token for a tenant (shown once; only its hash is stored)."""
    from orchestrator.api.tenants import issue_token

    sys.stdout.write(issue_token(name) + "\n")
