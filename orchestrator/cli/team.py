"""``raas say``, ``raas approve`` and ``raas approvals``: people in the loop (DESIGN.md rule 13)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.cli import PROJECTS, JsonFlag, api, app, print_json


@app.command(rich_help_panel=PROJECTS)
def say(
    project_id: str,
    text: Annotated[str, typer.Argument(help="What to tell the agent.")],
    agent: Annotated[
        str | None, typer.Option(help="The agent's id (default: the next agent to run).")
    ] = None,
    now: Annotated[bool, typer.Option("--now", help="End its turn after the tool call in flight.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Say something to a running agent: it reads it at its next turn boundary."""
    body = {"text": text, "agent": agent, "now": now}
    said = api().request("POST", f"/v1/projects/{project_id}/say", json=body)
    if as_json:
        print_json(said)
    else:
        sys.stdout.write(f"{project_id} said (event {said['seq']}); the agent reads it at its next turn\n")


@app.command(rich_help_panel=PROJECTS)
def approve(
    project_id: str,
    reject: Annotated[
        bool, typer.Option("--reject", help="Reject: the agent works on with the comment.")
    ] = False,
    message: Annotated[str | None, typer.Option("-m", "--message", help="A comment the agent reads.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Approve (or --reject) what a project waits for; a project that waits for nothing exits non-zero."""
    body = {"reject": reject, "comment": message}
    decided = api().request("POST", f"/v1/projects/{project_id}/approve", json=body)
    if as_json:
        print_json(decided)
    else:
        sys.stdout.write(f"{project_id}: {decided['title']} {decided['status']}\n")


@app.command(rich_help_panel=PROJECTS)
def approvals(as_json: JsonFlag = False) -> None:
    """What your projects wait for: each waiting approval, its deadline and default."""
    waiting = api().request("GET", "/v1/approvals")
    if as_json:
        print_json(waiting)
        return
    if not waiting:
        sys.stdout.write("nothing waits for you\n")
        return
    for item in waiting:
        deadline = item["deadline"] or "no deadline"
        title = _printable(item["title"])  # a planner's task title is a model's words
        sys.stdout.write(
            f"{item['project_id']}  {item['key']}  {title}  ({deadline}, then {item['default_action']})\n"
        )


def _printable(text: str) -> str:
    """``text`` on one line with no control character (no terminal escape sequence gets through)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())
