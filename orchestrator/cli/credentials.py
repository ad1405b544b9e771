"""``raas credentials``: the git credentials the coordinator clones (and delivers) with.

The secret is read from a file, never from the command line, where it would sit in the shell's
history and in every process listing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import ADMIN, JsonFlag, api, app, out, print_json
from shared.errors import InvalidInput

credentials_app = typer.Typer(help="Git credentials for repositories (stored encrypted by the coordinator).")
app.add_typer(credentials_app, name="credentials", rich_help_panel=ADMIN)


def _read_secret(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{what}: cannot read {path} ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
        raise InvalidInput(msg) from exc


@credentials_app.command("set")
def set_credential(
    host: Annotated[str, typer.Argument(help="The repository URL's host (with :port if it has one).")],
    username: Annotated[
        str, typer.Option(help="HTTPS user name (forges take any, e.g. x-access-token).")
    ] = "",
    token_file: Annotated[
        Path | None, typer.Option(help="A file holding the HTTPS token or password.")
    ] = None,
    ssh_key_file: Annotated[Path | None, typer.Option(help="A file holding an SSH private key.")] = None,
) -> None:
    """Store (or replace) your credential for a git host."""
    if (token_file is None) == (ssh_key_file is None):
        msg = "give exactly one of --token-file FILE or --ssh-key-file FILE"
        raise InvalidInput(msg)
    if token_file is not None:
        body = {"kind": "token", "username": username, "secret": _read_secret(token_file, "--token-file")}
    else:
        assert ssh_key_file is not None
        body = {
            "kind": "ssh_key",
            "username": username,
            "secret": _read_secret(ssh_key_file, "--ssh-key-file"),
        }
    api().set_credential(host, body)
    out.print(f"credential for {host} stored", highlight=False, markup=False)


@credentials_app.command("ls")
def list_credentials(as_json: JsonFlag = False) -> None:
    """List your credentials' hosts (never the secrets)."""
    rows = api().credentials()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out.print(f"{row['host']}  {row['kind']:<7}  {row['username']}", highlight=False, markup=False)


@credentials_app.command("rm")
def delete_credential(host: str) -> None:
    """Forget your credential for a git host."""
    api().delete_credential(host)
