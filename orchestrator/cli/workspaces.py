"""``raas migrate-workspaces``: move a coordinator's on-disk workspaces into the object store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import ADMIN, JsonFlag, app, out, print_json
from shared.settings import get_settings


@app.command("migrate-workspaces", rich_help_panel=ADMIN)
def migrate_workspaces_command(
    source: Annotated[
        Path | None,
        typer.Option(
            help="The directory of bare repositories to upload (default: RAAS_DATA_DIR/workspaces)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Upload every on-disk workspace the object store (RAAS_WORKSPACE_STORE) does not hold yet.

    Safe to run again: workspaces already in the store are left as they are.
    """
    from orchestrator.workspaces.migrate import migrate_workspaces  # boto3: only this command needs it

    moved = migrate_workspaces(get_settings(), source)
    if as_json:
        print_json({"uploaded": moved.uploaded, "already_in_store": moved.already})
        return
    out.print(
        f"{len(moved.uploaded)} workspaces uploaded, {len(moved.already)} already in the store",
        highlight=False,
    )
