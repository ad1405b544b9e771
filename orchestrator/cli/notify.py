"""``raas notify``: which events of your projects go to a signed webhook, Slack or mail.

Secrets are read from a file, never from the command line (shell history, process listings):
a webhook's HMAC key, the Slack incoming webhook's URL, the SMTP password.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from orchestrator.cli import ADMIN, JsonFlag, api, app, out, print_json
from shared.errors import InvalidInput
from shared.event_payloads import NOTIFIABLE
from shared.models import NotificationMedium

notify_app = typer.Typer(help="Notifications: events to a signed webhook, Slack or mail.")
app.add_typer(notify_app, name="notify", rich_help_panel=ADMIN)
SMTP_PORTS = {"smtp": 587, "smtps": 465}


def _read_secret(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"--secret-file: cannot read {path} ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
        raise InvalidInput(msg) from exc


def _smtp(url: str, tls: str | None, sender: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if parts.scheme not in SMTP_PORTS or not parts.hostname or not parts.username:
        msg = f"--smtp {url!r} is not smtp://USER@HOST[:PORT] (or smtps:// for TLS from the start)"
        raise InvalidInput(msg)
    if parts.password:
        msg = "--smtp must not hold the password: put it in --secret-file FILE"
        raise InvalidInput(msg)
    return {
        "host": parts.hostname,
        "port": parts.port or SMTP_PORTS[parts.scheme],
        "username": parts.username,
        "sender": sender,
        "tls": tls or ("ssl" if parts.scheme == "smtps" else "starttls"),
    }


@notify_app.command("add")
def add(
    medium: Annotated[NotificationMedium, typer.Argument(help="webhook, slack or mail.")],
    target: Annotated[
        str, typer.Argument(help="webhook: its http(s) URL; mail: the recipients; slack: none.")
    ] = "",
    secret_file: Annotated[
        Path | None,
        typer.Option(help="webhook: the HMAC key; slack: the incoming webhook URL; mail: the SMTP password."),
    ] = None,
    events: Annotated[
        str | None, typer.Option(help=f"Comma-separated event types (default: all: {', '.join(NOTIFIABLE)}).")
    ] = None,
    project: Annotated[
        str | None, typer.Option(help="Only this project's events (default: all yours).")
    ] = None,
    smtp: Annotated[str | None, typer.Option(help="mail: smtp://USER@HOST[:PORT] or smtps://…")] = None,
    smtp_tls: Annotated[
        str | None, typer.Option(help="mail: starttls, ssl or none (none: a server on loopback only).")
    ] = None,
    sender: Annotated[str, typer.Option("--from", help="mail: the From address (default: USER).")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Send events of your projects (or of one) somewhere, signed or escaped for the medium."""
    body: dict[str, Any] = {
        "medium": medium.value,
        "target": target,
        "secret": _read_secret(secret_file) if secret_file is not None else "",
        "project_id": project,
    }
    if events is not None:
        body["events"] = [name.strip() for name in events.split(",") if name.strip()]
    if smtp is not None:
        body["smtp"] = _smtp(smtp, smtp_tls, sender)
    row = api().request("POST", "/v1/notifications", json=body)
    if as_json:
        print_json(row)
        return
    out.print(f"{row['id']}  {row['medium']} to {row['target']}", highlight=False, markup=False)


@notify_app.command("ls")
def list_notifications(as_json: JsonFlag = False) -> None:
    """List your notifications, and which are paused and why (never the secrets)."""
    rows = api().request("GET", "/v1/notifications")
    if as_json:
        print_json(rows)
        return
    for row in rows:
        scope = f"project {row['project_id']}" if row["project_id"] else "all projects"
        kinds = "all events" if sorted(row["events"]) == sorted(NOTIFIABLE) else ",".join(row["events"])
        pending = f" ({row['pending']} pending)" if row["pending"] else ""
        line = f"{row['id']}  {row['medium']:<7}  {row['target']}  {scope}  {kinds}  {row['state']}{pending}"
        out.print(line, highlight=False, markup=False, soft_wrap=True)


def _act(subscription_id: str, verb: str) -> None:
    row = api().request("POST", f"/v1/notifications/{subscription_id}/{verb}")
    out.print(f"{row['id']}  {row['state']}", highlight=False, markup=False)


@notify_app.command("pause")
def pause(subscription_id: str) -> None:
    """Pause a notification: nothing is sent to it, and nothing new kept for it, until resumed."""
    _act(subscription_id, "pause")


@notify_app.command("resume")
def resume(subscription_id: str) -> None:
    """Resume a notification (a failing endpoint's too): what is pending is tried again now."""
    _act(subscription_id, "resume")


@notify_app.command("rm")
def remove(subscription_id: str) -> None:
    """Remove a notification and what it has pending."""
    api().request("DELETE", f"/v1/notifications/{subscription_id}")
