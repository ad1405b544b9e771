"""Commands that act on projects through the coordinator's API."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli import INSPECT, PROJECTS, JsonFlag, api, app, out, print_json
from orchestrator.cli.exit_codes import ExitCode
from orchestrator.remotes.clone import parse_remote
from shared import rounds
from shared.errors import InvalidInput, ServiceUnavailable
from shared.event_payloads import (
    AgentOutputChunk,
    AgentToolCall,
    LlmRetry,
    MemoryWritten,
    MessageSent,
    NoWorkers,
    ToolExecuted,
    WorkersBack,
    payload,
)
from shared.events import TERMINAL_EVENTS
from shared.llm_retry import retry_line
from shared.models import PauseReason, ProjectStatus
from shared.models.projects import reason_line
from shared.schemas import EventOut, MemorySizeOut


@app.command(rich_help_panel=PROJECTS)
def submit(
    directory: Annotated[
        Path | None, typer.Argument(help="Project directory with PROMPT.md (and raas.toml).")
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(help="Start from this git repository (its credential: `raas credentials set HOST`)."),
    ] = None,
    ref: Annotated[
        str | None, typer.Option(help="The repository's branch (default: its default branch).")
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(help="PROMPT.md to use with --repo (default: the directory's, else the repo's)."),
    ] = None,
    as_json: JsonFlag = False,
    start: Annotated[bool, typer.Option(help="Start the project right away.")] = True,
) -> None:
    """Upload a project directory (or start from a repository) and start it; print its id."""
    from orchestrator.scheduling.submission import read_config, read_project_files
    from shared.archive import pack_directory, pack_files

    if directory is not None and not directory.is_dir():
        msg = f"{directory} is not a directory; pass the project directory"
        raise InvalidInput(msg)
    # The directory's raas.toml, parsed once here (the coordinator parses what it receives once).
    config = read_config(directory) if directory is not None else None
    if repo is None and config is not None and config.source.repo is not None:
        repo, ref = config.source.repo, ref or config.source.ref
    client = api()
    if repo is not None:
        # Checked here too: a URL carrying a password must not travel (nor land in an access log).
        parse_remote(repo)
        name = directory.resolve().name if directory is not None else repo.rstrip("/").rsplit("/", 1)[-1]
        files = _repo_overlay(directory, prompt_file)
        project = client.create_project(pack_files(files), name.removesuffix(".git"), repo=repo, ref=ref)
    else:
        if directory is None or prompt_file is not None or ref is not None:
            msg = "pass a project directory, or --repo URL (with --ref and --prompt-file if needed)"
            raise InvalidInput(msg)
        # The same checks the coordinator makes, before any upload.
        read_project_files(directory, config)
        project = client.create_project(pack_directory(directory), directory.resolve().name)
    if start:
        project = client.start_project(project["id"])
    if as_json:
        print_json(project)
    else:
        sys.stdout.write(project["id"] + "\n")


def _repo_overlay(directory: Path | None, prompt_file: Path | None) -> dict[str, str]:
    """PROMPT.md and raas.toml given on this side for a project from a repository; what is
    missing comes from the repository. The prompt is checked here the way the coordinator checks
    it; raas.toml was, when ``submit`` read it."""
    from orchestrator.scheduling.prompt import PROMPT_FILE, check_prompt

    files: dict[str, str] = {}
    if directory is not None:
        for name in (PROMPT_FILE, "raas.toml"):
            if (directory / name).is_file():
                files[name] = (directory / name).read_text(encoding="utf-8")
    if prompt_file is not None:
        if not prompt_file.is_file():
            msg = f"--prompt-file: {prompt_file} is not a file"
            raise InvalidInput(msg)
        files[PROMPT_FILE] = prompt_file.read_text(encoding="utf-8")
    if PROMPT_FILE in files:
        check_prompt(files[PROMPT_FILE])
    return files


@app.command(rich_help_panel=PROJECTS)
def status(project_id: str, as_json: JsonFlag = False) -> None:
    """Show a project's status, agents and iterations."""
    project = api().project(project_id)
    if as_json:
        print_json(project)
        return
    code = project.get("pause_reason")
    reason = reason_line(PauseReason(code) if code else None, project["status_reason"])
    out.print(
        f"[bold]{project['name']}[/bold] {project['id']}  status: [bold]{project['status']}[/bold]"
        + (f" ({reason})" if reason else "")
    )
    out.print(
        f"cost: ${float(project['spent_usd']):.4f} of ${float(project['budget_limit_usd']):.2f}   "
        f"tokens: {project['input_tokens']} in / {project['output_tokens']} out"
    )
    if project.get("source_repo"):
        source = (
            f"source: {project['source_repo']} {project['source_ref']} at {project['source_commit'][:12]}"
        )
        out.print(source, highlight=False, markup=False, soft_wrap=True)
    for line in delivery_lines(project.get("deliveries") or []):
        # Never wrapped: its branch and pull request address are copied from the terminal.
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if project.get("memory"):
        out.print(memory_line(MemorySizeOut.model_validate(project["memory"])), highlight=False, markup=False)
    if project.get("waiting_for_worker_since"):
        out.print(
            waiting_for_worker(datetime.fromisoformat(project["waiting_for_worker_since"])),
            highlight=False,
            markup=False,
        )
    for it in project["iterations"]:
        mark = "done" if it["completed_task"] else (it["error"] or it["status"])
        out.print(f"  iteration {it['number']:>3}  {it['status']:<9}  ${float(it['cost_usd']):.4f}  {mark}")


@app.command("ls", rich_help_panel=PROJECTS)
def list_projects(
    as_json: JsonFlag = False,
    trigger: Annotated[
        str | None, typer.Option("--trigger", help="Only the runs of this trigger (id or name).")
    ] = None,
) -> None:
    """List projects, newest first."""
    rows = api().projects() if trigger is None else api().request("GET", f"/v1/triggers/{trigger}/projects")
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out.print(
            f"{row['id']}  {row['status']:<9}  ${float(row['spent_usd']):>8.4f}  {row['name']}",
            highlight=False,
        )


def _lifecycle(project_id: str, verb: str, as_json: bool) -> None:
    project = api().action(project_id, verb)
    if as_json:
        print_json(project)
    else:
        sys.stdout.write(f"{project['id']} {project['status']}\n")


@app.command(rich_help_panel=PROJECTS)
def pause(project_id: str, as_json: JsonFlag = False) -> None:
    """Pause a running project: its iterations stop after their current LLM call."""
    _lifecycle(project_id, "pause", as_json)


@app.command(rich_help_panel=PROJECTS)
def resume(project_id: str, as_json: JsonFlag = False) -> None:
    """Resume a paused project (also resets an open circuit breaker)."""
    _lifecycle(project_id, "resume", as_json)


@app.command(rich_help_panel=PROJECTS)
def stop(project_id: str, as_json: JsonFlag = False) -> None:
    """Stop a project for good: running iterations end, their containers are removed."""
    _lifecycle(project_id, "stop", as_json)


@app.command(rich_help_panel=PROJECTS)
def prompt(
    project_id: str,
    file: Annotated[Path, typer.Argument(help="The new PROMPT.md.", exists=True, dir_okay=False)],
    as_json: JsonFlag = False,
) -> None:
    """Replace a project's PROMPT.md; the next iteration reads the new text."""
    project = api().set_prompt(project_id, file.read_text(encoding="utf-8"))
    if as_json:
        print_json(project)
    else:
        sys.stdout.write(f"{project['id']} prompt updated\n")


@app.command(rich_help_panel=PROJECTS)
def budget(
    project_id: str,
    limit: Annotated[str, typer.Option("--limit", help="New spending limit in USD.")],
    as_json: JsonFlag = False,
) -> None:
    """Change a project's budget; a project paused for its budget resumes if there is room."""
    try:
        amount = Decimal(limit)
    except InvalidOperation as exc:
        msg = f"--limit {limit!r} is not an amount of USD; pass e.g. --limit 10"
        raise InvalidInput(msg) from exc
    project = api().set_budget(project_id, str(amount))
    if as_json:
        print_json(project)
    else:
        sys.stdout.write(
            f"{project['id']} budget ${float(project['budget_limit_usd']):.2f} ({project['status']})\n"
        )


@app.command(rich_help_panel=INSPECT)
def cost(
    project_id: str,
    iterations: Annotated[bool, typer.Option("--iterations", help="One receipt per iteration.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """What a project cost: total, per agent, per model, per hour (and per iteration)."""
    report = api().cost(project_id, iterations)
    if as_json:
        print_json(report)
        return
    tokens = report["tokens"]
    out.print(
        f"total ${float(report['total_usd']):.4f} of ${float(report['limit_usd']):.2f}"
        f"   tokens in {tokens['input']} out {tokens['output']}"
        f" cache write {tokens['cache_write']} read {tokens['cache_read']}",
        highlight=False,
    )
    for title in ("by_agent", "by_model", "by_hour"):
        out.print(title.replace("_", " ") + ":", highlight=False)
        for line in report[title]:
            out.print(
                f"  {line['key']:<40} {line['calls']:>5} calls  ${float(line['cost_usd']):.4f}",
                highlight=False,
            )
    for receipt in report.get("receipts") or []:
        t = receipt["tokens"]
        out.print(
            f"  iteration {receipt['number']:>3} {receipt['model'] or '-':<20}"
            f" in {t['input']} out {t['output']} cw {t['cache_write']} cr {t['cache_read']}"
            f"  ${float(receipt['cost_usd']):.4f}  "
            f"{receipt['duration_s'] or 0:.1f}s",
            highlight=False,
        )


@app.command(rich_help_panel=INSPECT)
def graph(project_id: str, as_json: JsonFlag = False) -> None:
    """The task DAG by waves; --json gives the agent graph (agents, their status, parent edges)."""
    data = api().graph(project_id)
    if as_json:
        print_json(data)
        return
    for index, wave in enumerate(data["waves"]):
        out.print(f"wave {index}:", highlight=False)
        for task in wave:
            after = f"  (after {', '.join(task['depends_on'])})" if task["depends_on"] else ""
            worker = "(group)" if task.get("kind") == "group" else task["category"]
            out.print(
                f"  {task['key']:<16} {task['status']:<10} {worker:<10} {task['title']}{after}",
                highlight=False,
                markup=False,
            )
    for agent in data["agents"]:
        indent = "  " * (agent["depth"] + 1)
        out.print(
            f"{indent}{agent['category']} {agent['id']} {agent['status']} task={agent['task']} "
            f"iterations={agent['iterations']} ${float(agent['cost_usd']):.4f}",
            highlight=False,
            markup=False,
        )


@app.command(rich_help_panel=INSPECT)
def diff(
    project_id: str,
    iteration: Annotated[int | None, typer.Option(help="Only what this iteration changed.")] = None,
) -> None:
    """Show what the agents changed in the workspace (git diff)."""
    sys.stdout.write(api().diff(project_id, iteration))


def delivery_lines(deliveries: list[dict[str, Any]]) -> list[str]:
    """Each delivery's branch, state and pull request, as ``raas status`` shows them."""
    lines = []
    for row in deliveries:
        what = f"task {row['task_key']}" if row["task_key"] else "project"
        line = f"delivery: {what} -> {row['branch']}  {row['status']}"
        if row.get("pull_request_url"):
            line += f"  {row['pull_request_url']}"
        if row["status"] == "failed" and row.get("error"):
            line += f"  ({row['error']})"
        lines.append(line)
    return lines


@app.command(rich_help_panel=PROJECTS)
def deliver(project_id: str, as_json: JsonFlag = False) -> None:
    """Try a project's failed deliveries again (its branches and pull request), from the failed step."""
    answer = api().request("POST", f"/v1/projects/{project_id}/deliver")
    if as_json:
        print_json(answer)
        return
    for branch in answer["branches"]:
        sys.stdout.write(f"{project_id} delivering {branch}\n")


def memory_line(size: MemorySizeOut) -> str:
    """The memory bank's size, as ``raas status`` shows it."""
    conflicts = f", {size.conflicts} in conflict" if size.conflicts else ""
    shared = " (shared by the tenant's projects)" if size.shared else ""
    return f"memory: {size.entries} keys, {size.size_bytes / 1024:.1f} KiB{conflicts}{shared}"


def waiting_for_worker(since: datetime) -> str:
    """The line that says a project's iterations have no worker."""
    return (
        f"waiting for a worker since {since:%Y-%m-%d %H:%M:%S %Z}: no live worker consumes the "
        "iterations queue (start one: raas worker)"
    )


def format_event(event: EventOut) -> str:
    data = payload(event)
    if isinstance(data, NoWorkers):
        body = waiting_for_worker(data.since)
    elif isinstance(data, WorkersBack):
        body = f"a worker is back after {data.waited_s}s: {', '.join(data.workers)}"
    elif isinstance(data, AgentOutputChunk):
        body = data.text
    elif isinstance(data, AgentToolCall):
        body = f"{data.tool} {json.dumps(data.input)[:160]}"
    elif isinstance(data, ToolExecuted):
        body = f"{data.tool} {json.dumps(data.output)[:160]}"
    elif isinstance(data, MemoryWritten):
        conflict = " IN CONFLICT" if data.conflict else ""
        body = f"{data.key!r} version {data.version}{conflict}: {json.dumps(data.preview)[:160]}"
    elif isinstance(data, MessageSent):
        body = f"to {data.to} ({len(data.recipients)} recipients): {json.dumps(data.text)[:160]}"
    elif isinstance(data, LlmRetry):
        # "model unreachable, retry 3 in 4 s (APIConnectionError: ...)": why, which retry, how long
        body = retry_line(data.reason, data.attempt, data.delay_s) + (
            f" ({data.error[:160]})" if data.error else ""
        )
    elif (line := rounds.describe(data)) is not None:  # a pull request round, the follow
        body = line
    else:
        body = json.dumps(event.data, default=str)[:300]
    return f"{event.seq:>5} {event.ts:%H:%M:%S} {event.type:<20} {body}"


# How long `raas follow` keeps trying to reach a coordinator that went away (restarting, or
# every replica behind the balancer down) before it gives up.
FOLLOW_RECONNECT_S = 300.0


@app.command(rich_help_panel=INSPECT)
def follow(project_id: str, as_json: JsonFlag = False) -> None:
    """Print a project's events live, in order, until it ends (reconnecting if the link drops)."""
    client = api()
    last, final = 0, None
    lost_since: float | None = None
    while True:
        try:
            for event in client.events(project_id, after=last, follow=True):
                lost_since = None
                last = event.seq
                sys.stdout.write((event.model_dump_json() if as_json else format_event(event)) + "\n")
                sys.stdout.flush()
                if event.type in TERMINAL_EVENTS:
                    final = event.type
            break
        except ServiceUnavailable:
            # Given up only after FOLLOW_RECONNECT_S without an event, not after a count of tries
            # over the project's life: each coordinator restart used up tries (chaos soak).
            lost_since = lost_since if lost_since is not None else time.monotonic()
            if time.monotonic() - lost_since > FOLLOW_RECONNECT_S:
                raise
            time.sleep(1)
    if final is None:
        raise typer.Exit(ExitCode.FAILED)
    raise typer.Exit(ExitCode.for_status(ProjectStatus(final.removeprefix("project_"))))
