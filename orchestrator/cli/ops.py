"""Commands for operators: what the cluster is doing right now."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from orchestrator.cli import ADMIN, JsonFlag, api, app, out, print_json


@app.command(rich_help_panel=ADMIN)
def workers(
    as_json: JsonFlag = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the workers' replies.")] = 1.0,
) -> None:
    """List live workers (and coordinators), their queues and the iterations they run."""
    nodes = api().workers(timeout)
    if as_json:
        print_json(nodes)
        return
    if not nodes:
        out.print(f"no worker answered within {timeout:g}s", highlight=False)
        return
    now = datetime.now(UTC)
    for node in nodes:
        slots = f"{node['concurrency']} slots, " if node.get("concurrency") is not None else ""
        out.print(
            f"[bold]{node['name']}[/bold]  queues: {', '.join(node['queues'])}  "
            f"{slots}{len(node['active'])} busy",
            highlight=False,
        )
        for task in node["active"]:
            out.print("  " + _describe(task, now), highlight=False)


def _describe(task: dict[str, Any], now: datetime) -> str:
    parts = [task["name"]]
    if task.get("project_id"):
        parts.append(f"project {task['project_id']}")
    if task.get("number") is not None:
        parts.append(f"iteration {task['number']} (attempt {task['attempt']}, {task['category']})")
    elif task.get("iteration_id"):
        parts.append(f"iteration {task['iteration_id']}")
    if task.get("started_at"):
        started = datetime.fromisoformat(task["started_at"])
        parts.append(f"{(now - started).total_seconds():.0f}s")
    return "  ".join(parts)
