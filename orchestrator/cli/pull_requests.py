"""``raas feedback``: report an event on a pull request the service follows, by hand or from a CI
system that is not the forge's: a failed check (with its log's tail from a file), a review comment
(on a line of a file), a merge or a close. It is taken as the forge's would be; a pull request no
project of yours follows is refused in one line and changes nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli import PROJECTS, JsonFlag, api, app, out, print_json
from orchestrator.scheduling.pr_events import LOG_TAIL_CHARS
from shared.errors import InvalidInput
from shared.models import new_id

_PULL_REQUEST = re.compile(r"^(?P<repo>[^#\s]+/[^#\s]+)#(?P<number>[1-9][0-9]*)$")


def _event(
    check: str | None, log_file: Path | None, comment: str | None, where: dict[str, Any], states: list[str]
) -> dict[str, Any]:
    """The PrEvent (orchestrator.scheduling.pr_events) as JSON, from the command's options."""
    given = [name for name, value in (("--check", check), ("--comment", comment)) if value] + states
    if len(given) != 1:
        msg = "say one thing that happened: --check NAME, --comment TEXT, --merged or --closed"
        raise InvalidInput(msg)
    state = states[0] if states else None
    if state:
        return {"kind": state}
    if check:
        tail = ""
        if log_file is not None:
            try:
                tail = log_file.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
            except OSError as exc:
                msg = f"--log-file: cannot read {log_file} ({exc.strerror})"
                raise InvalidInput(msg) from exc
        return {"kind": "check_failed", "name": check, "run_id": where.get("run_id"), "log_tail": tail}
    review = f"cli:{new_id()}"
    return {
        "kind": "review",
        "review_id": review,
        "state": "commented",
        "comments": [{"id": review, "body": comment, **where}],
    }


@app.command(rich_help_panel=PROJECTS)
def feedback(
    pull_request: Annotated[
        str, typer.Argument(help="OWNER/NAME#NUMBER of a pull request the service opened")
    ],
    check: Annotated[str | None, typer.Option(help="A check of this name failed")] = None,
    run_id: Annotated[
        str | None, typer.Option(help="The check's run (the same run reported again starts nothing)")
    ] = None,
    log_file: Annotated[Path | None, typer.Option(help="Its log (the tail is kept)")] = None,
    comment: Annotated[str | None, typer.Option(help="A review comment")] = None,
    path: Annotated[str | None, typer.Option(help="The comment's file")] = None,
    line: Annotated[int | None, typer.Option(help="The comment's line")] = None,
    merged: Annotated[bool, typer.Option("--merged", help="It was merged")] = False,
    closed: Annotated[bool, typer.Option("--closed", help="It was closed without merging")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Report what happened on a followed pull request: a round starts as for the forge's news."""
    match = _PULL_REQUEST.match(pull_request)
    if match is None:
        msg = f"{pull_request!r} is not OWNER/NAME#NUMBER (e.g. alice/app#7)"
        raise InvalidInput(msg)
    states = [name for name, given in (("merged", merged), ("closed", closed)) if given]
    where: dict[str, Any] = {"path": path, "line": line} if path else {}
    if check:
        where = {"run_id": run_id or f"cli:{new_id()}"}
    event = _event(check, log_file, comment, where, states)
    body = {"repo": match["repo"], "number": int(match["number"]), "event": event}
    answer = api().request("POST", "/v1/pull-requests/feedback", json=body)
    if as_json:
        print_json(answer)
        return
    said = f" ({answer['status_line']})" if answer.get("status_line") else ""
    taken = f"{pull_request}: taken by project {answer['project_id']}, {answer['status']}{said}"
    out.print(taken, markup=False, highlight=False, soft_wrap=True)
