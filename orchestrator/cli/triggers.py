"""``raas trigger``: work that starts by itself — forge webhooks, generic webhooks, schedules.

``add`` checks the whole spec here first (a cron that does not parse, a template field the source
does not have, a repository URL that is not http(s): one line naming it, nothing sent), then the
coordinator checks it again. The webhook's secret is read from a file, never from the command line.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from orchestrator.cli import PROJECTS, JsonFlag, api, app, out, print_json
from shared.archive import pack_directory
from shared.errors import InvalidInput, RaasError
from shared.project_config import describe_validation_error
from shared.triggers import TriggerSpec

trigger_app = typer.Typer(help="Triggers: runs started by issues, webhooks and schedules.")
app.add_typer(trigger_app, name="trigger", rich_help_panel=PROJECTS)

_List = Annotated[str, typer.Option(help="Comma-separated.")]


def _read(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{what}: cannot read {path} ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
        raise InvalidInput(msg) from exc


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _spec(data: dict[str, Any]) -> TriggerSpec:
    try:
        return TriggerSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error("trigger", exc)) from None


def _upload_files(trigger_id: str, directory: Path) -> Any:
    """The directory, uploaded as the trigger's; if refused, the trigger is removed again."""
    try:
        return api().request(
            "PUT",
            f"/v1/triggers/{trigger_id}/files",
            content=pack_directory(directory),
            headers={"Content-Type": "application/gzip"},
        )
    except RaasError:
        api().request("DELETE", f"/v1/triggers/{trigger_id}")
        raise


@trigger_app.command("add")
def add(
    name: str,
    source: Annotated[str, typer.Option(help="github, gitlab, webhook or schedule.")],
    prompt_file: Annotated[Path, typer.Option(help="PROMPT.md template, with {{ field }}s.")],
    config_file: Annotated[Path | None, typer.Option(help="raas.toml of every run.")] = None,
    repo: Annotated[str | None, typer.Option(help="The repository runs start from (http(s)).")] = None,
    ref: Annotated[str | None, typer.Option(help="Its branch.")] = None,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="A directory runs start from, uploaded once (no --repo).")
    ] = None,
    secret_file: Annotated[Path | None, typer.Option(help="A file holding the webhook's secret.")] = None,
    events: _List = "issue_labeled",
    labels: _List = "",
    repositories: _List = "",
    author_associations: _List = "",
    command: Annotated[str, typer.Option(help="The comment command that starts a run.")] = "/raas run",
    cron: Annotated[str | None, typer.Option(help='A schedule, e.g. "0 3 * * 1-5".')] = None,
    timezone: Annotated[str, typer.Option(help="The schedule's IANA time zone.")] = "UTC",
    catch_up: Annotated[str, typer.Option(help='"one" or "none": slots missed while down.')] = "one",
    budget_per_run: Annotated[str, typer.Option(help="USD per run.")] = "5",
    budget_per_day: Annotated[str | None, typer.Option(help="USD per 24 hours.")] = None,
    max_concurrent: int = 1,
    runs_per_hour: int | None = None,
    runs_per_day: int | None = None,
    on_active: Annotated[str, typer.Option(help='"ignore", "queue" or "restart".')] = "ignore",
    as_json: JsonFlag = False,
) -> None:
    """Add a trigger; prints its id (and the hook's path for a webhook)."""
    data: dict[str, Any] = {
        "name": name,
        "source": source,
        "secret": (_read(secret_file, "--secret-file") or "").strip() or None,
        "filter": {
            "events": _split(events),
            "labels": _split(labels),
            "repositories": _split(repositories),
            "author_associations": _split(author_associations),
            "command": command,
        },
        "template": {
            "repo": repo,
            "ref": ref,
            "prompt": _read(prompt_file, "--prompt-file"),
            "config": _read(config_file, "--config-file") or "",
        },
        "limits": {
            "budget_per_run_usd": budget_per_run,
            "budget_per_day_usd": budget_per_day,
            "max_concurrent": max_concurrent,
            "runs_per_hour": runs_per_hour,
            "runs_per_day": runs_per_day,
        },
        "schedule": {"cron": cron, "timezone": timezone, "catch_up": catch_up} if cron else None,
        "on_active": on_active,
    }
    spec = _spec(data)
    body = spec.model_dump(mode="json")
    body["secret"] = spec.secret.get_secret_value() if spec.secret else None
    if directory is not None and not directory.is_dir():
        msg = f"--dir: {directory} is not a directory"
        raise InvalidInput(msg)
    created = api().request("POST", "/v1/triggers", json=body)
    if directory is not None:
        created = _upload_files(created["id"], directory)
    if as_json:
        print_json(created)
        return
    where = f"  {created['hook_path']}" if created.get("hook_path") else ""
    out.print(f"{created['id']}{where}", highlight=False, markup=False)


@trigger_app.command("ls")
def list_triggers(as_json: JsonFlag = False) -> None:
    """List your triggers."""
    rows = api().request("GET", "/v1/triggers")
    if as_json:
        print_json(rows)
        return
    for row in rows:
        nxt = f"  next {row['next_slot_at']}" if row.get("next_slot_at") else ""
        line = f"{row['id']}  {row['status']:<6}  {row['source']:<8}  {row['name']}{nxt}"
        out.print(line, highlight=False, markup=False)


@trigger_app.command("show")
def show(trigger: str, as_json: JsonFlag = False) -> None:
    """A trigger and its latest runs."""
    found = api().request("GET", f"/v1/triggers/{trigger}")
    runs = api().request("GET", f"/v1/triggers/{trigger}/runs", params={"limit": 20})
    if as_json:
        print_json({**found, "runs": runs})
        return
    limits = found["spec"]["limits"]
    per_day = f"${limits['budget_per_day_usd']}" if limits["budget_per_day_usd"] else "no limit"
    lines = [
        f"{found['id']}  {found['name']}  {found['source']}  {found['status']}  "
        f"on_active={found['on_active']}",
        f"budget ${Decimal(limits['budget_per_run_usd'])} per run, {per_day} per day, "
        f"max_concurrent {limits['max_concurrent']}",
    ]
    out.print("\n".join(lines), highlight=False, markup=False)
    for run in runs:
        reason = f"  ({run['reason']})" if run.get("reason") else ""
        line = f"  {run['id']}  {run['status']:<10}  {run['project_id'] or '-':<16}  {run['key']}{reason}"
        out.print(line, highlight=False, markup=False)


@trigger_app.command("pause")
def pause(trigger: str) -> None:
    """Pause a trigger: deliveries are ignored and schedule slots skipped."""
    found = api().request("POST", f"/v1/triggers/{trigger}/pause")
    out.print(f"{found['id']} {found['status']}", highlight=False, markup=False)


@trigger_app.command("resume")
def resume(trigger: str) -> None:
    """Resume a trigger (a schedule from its next slot: no catch-up for the pause)."""
    found = api().request("POST", f"/v1/triggers/{trigger}/resume")
    out.print(f"{found['id']} {found['status']}", highlight=False, markup=False)


@trigger_app.command("rm")
def remove(trigger: str) -> None:
    """Remove a trigger (the projects it started stay)."""
    api().request("DELETE", f"/v1/triggers/{trigger}")
