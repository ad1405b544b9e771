"""What ``raas run`` shows while a project runs: the in-process event bus, drawn.

On a terminal it is a Rich live view (the agent tree with status, iterations, tokens and cost,
the total against the project's budget as it is now, the last line of agent output); otherwise (a
pipe, a CI log) it prints one plain line per event. Events carry no token counts, so the view reads
those (and the budget, which ``raas budget`` may change) from the database, at most twice a second
and only after something happened.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from orchestrator.queries import projects
from shared import events
from shared.event_payloads import (
    AgentOutputChunk,
    AgentToolCall,
    IterationComplete,
    IterationError,
    IterationStarted,
    LlmRetry,
    ToolExecuted,
    payload,
)
from shared.llm_retry import retry_line
from shared.project_config import ProjectConfig
from shared.schemas import AgentOut, EventOut, ProjectDetail

log = logging.getLogger(__name__)
SNAPSHOT_EVERY_S = 0.5
PREVIEW_CHARS = 160
TAIL_CHARS = 2000
_STATUS_STYLE = {
    "running": "bold cyan",
    "working": "cyan",
    "completed": "bold green",
    "failed": "bold red",
    "error": "red",
    "stopped": "yellow",
    "paused": "bold yellow",
}

_STATUS_AFTER = {
    events.PROJECT_STARTED: "running",
    events.PROJECT_RESUMED: "running",
    events.PROJECT_PAUSED: "paused",
    events.PROJECT_COMPLETED: "completed",
    events.PROJECT_FAILED: "failed",
    events.PROJECT_STOPPED: "stopped",
}


class RunView:
    """An EventBus that shows one run; plain lines unless ``live`` (a terminal)."""

    def __init__(self, console: Console, *, live: bool, sandbox: str, config: ProjectConfig) -> None:
        self.console = console
        self.live = live
        self.sandbox = sandbox
        self.config = config
        self.project_id: str | None = None
        self.status = "created"
        self.iteration = 0
        self.last_output = ""
        self.last_tool = ""
        self._lock = threading.Lock()
        self._partial: dict[str, str] = {}
        self._tail = ""
        self._detail: ProjectDetail | None = None
        self._stale = True
        self._fetched_at = 0.0

    # The EventBus protocol: called by whichever thread committed the event.
    def publish(self, event: EventOut) -> None:
        if self.project_id is not None and event.project_id != self.project_id:
            return
        with self._lock:
            self._apply(event)
            if not self.live:
                self._print(event)

    @contextmanager
    def showing(self, project_id: str) -> Iterator[None]:
        """Draw the live view (on a terminal) while the body runs."""
        self.project_id = project_id
        if not self.live:
            sys.stdout.write(f"project {project_id}, sandbox: {self.sandbox}\n")
            yield
            return
        with Live(console=self.console, get_renderable=self._render, refresh_per_second=4) as live:
            try:
                yield
            finally:
                with self._lock:  # the last frame stays on screen: make it show the end
                    self._stale, self._fetched_at = True, 0.0
                live.refresh()

    def _apply(self, event: EventOut) -> None:
        data = payload(event)
        if event.type in _STATUS_AFTER:
            self.status = _STATUS_AFTER[event.type]
        elif isinstance(data, IterationStarted):
            self.iteration = max(self.iteration, data.number)
        elif isinstance(data, AgentOutputChunk):
            # Chunks end anywhere, mid-word included: the last line is read from what came so far.
            self._tail = (self._tail + data.text)[-TAIL_CHARS:]
            lines = [line for line in self._tail.splitlines() if line.strip()]
            if lines:
                self.last_output = lines[-1].strip()
        elif isinstance(data, AgentToolCall):
            self.last_tool = f"{data.tool} {json.dumps(data.input)}"[:PREVIEW_CHARS]
        elif isinstance(data, LlmRetry):  # a model that does not answer is said, not silence
            self.last_output = retry_line(data.reason, data.attempt, data.delay_s)
        if not isinstance(data, AgentOutputChunk):
            self._stale = True

    # Plain mode: one line per event; output text is printed a whole line at a time.
    def _print(self, event: EventOut) -> None:
        agent = event.agent_id or "-"
        data = payload(event)
        if isinstance(data, AgentOutputChunk):
            text = self._partial.pop(agent, "") + data.text
            *done, rest = text.split("\n")
            if rest:
                self._partial[agent] = rest
            for line in done:
                self._line(event, "output", line)
            return
        if agent in self._partial:
            self._line(event, "output", self._partial.pop(agent))
        self._line(event, event.type, _describe(event))

    def _line(self, event: EventOut, kind: str, body: str) -> None:
        sys.stdout.write(f"{event.ts:%H:%M:%S} {kind:<20} {body}\n")
        sys.stdout.flush()

    # Live mode: called by Rich's refresh thread.
    def _render(self) -> RenderableType:
        with self._lock:
            refresh = self._stale and time.monotonic() - self._fetched_at >= SNAPSHOT_EVERY_S
            if refresh:
                self._stale, self._fetched_at = False, time.monotonic()
        if refresh and self.project_id is not None:
            try:
                self._detail = projects.project_detail(self.project_id)
            except Exception:  # a busy database only delays the numbers
                log.debug("no snapshot this time", exc_info=True)
                self._stale = True
        return self.render()

    def render(self) -> RenderableType:
        detail = self._detail
        name = detail.name if detail else "project"
        header = Text.assemble(
            (f"{name} ", "bold"),
            (f"{self.project_id or ''}  ", "dim"),
            (self.status, _STATUS_STYLE.get(self.status, "")),
            f"   iteration {self.iteration} of at most {self.config.max_iterations}",
            (f"   sandbox: {self.sandbox}", "dim"),
        )
        tree = Tree(Text("agents", style="bold"))
        if detail is not None:
            _add_agents(tree, detail.agents, None)
        spent = float(detail.spent_usd) if detail else 0.0
        # The project's limit, not raas.toml's: `raas budget` (or the dashboard) may have changed it.
        limit = float(detail.budget_limit_usd if detail else self.config.budget.limit_usd)
        budget = Table.grid(padding=(0, 1))
        budget.add_row(
            Text(f"cost ${spent:.4f} of ${limit:.2f}"),
            ProgressBar(total=max(limit, 1e-9), completed=min(spent, limit), width=30),
            Text(f"{spent / limit:.0%}" if limit else ""),
        )
        parts: list[RenderableType] = [header, tree, budget]
        if self.last_tool:
            parts.append(Text(f"tool  {self.last_tool}", style="dim", overflow="ellipsis", no_wrap=True))
        parts.append(Text(f"› {self.last_output}", overflow="ellipsis", no_wrap=True))
        return Group(*parts)


def _add_agents(node: Tree, agents: list[AgentOut], parent_id: str | None) -> None:
    for agent in agents:
        if agent.parent_id != parent_id:
            continue
        status = agent.status.value
        label = Text.assemble(
            (f"{agent.category} ", "bold"),
            (f"{agent.id[:8]}  ", "dim"),
            (f"{status:<9}", _STATUS_STYLE.get(status, "")),
            f"  iterations {agent.iterations}",
            f"  tokens {agent.input_tokens:,} in / {agent.output_tokens:,} out",
            f"  ${float(agent.cost_usd):.4f}",
        )
        _add_agents(node.add(label), agents, agent.id)


def _describe(event: EventOut) -> str:
    data = payload(event)
    if isinstance(data, IterationStarted):
        return f"#{data.number} (attempt {data.attempt})"
    if isinstance(data, IterationComplete):
        done = "task complete" if data.completed_task else "task not complete"
        return f"#{data.number} {done}; files changed: {', '.join(data.files_changed) or '-'}"
    if isinstance(data, IterationError):
        kind = data.kind.value if data.kind is not None else None
        return f"#{data.number} {kind}: {data.error}"
    if isinstance(data, AgentToolCall):
        return f"{data.tool} {json.dumps(data.input)}"[:PREVIEW_CHARS]
    if isinstance(data, LlmRetry):
        return retry_line(data.reason, data.attempt, data.delay_s)
    if isinstance(data, ToolExecuted):
        first = next((line for line in data.output.splitlines() if line.strip()), "")
        return f"{data.tool} {'error' if data.is_error else 'ok'}: {first}"[:PREVIEW_CHARS]
    return json.dumps(event.data, default=str)[: PREVIEW_CHARS * 2]
