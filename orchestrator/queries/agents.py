"""One agent, as the dashboard's inspector shows it: its overview (status, tokens by kind, cost,
iterations, task), its outputs (each iteration's diff and the workspace's diff since its start,
files marked new / deleted / renamed) and its config (the category's model, tools, harness,
prompt). Its history is the transcript (``orchestrator.transcripts.store``).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func, select

from orchestrator.queries.costs import CALL_SUMS, Tokens, cost_line
from orchestrator.scheduling import workspace
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.workspaces import WorkspaceStore
from shared.db import session_scope
from shared.errors import GitError, NotFound
from shared.git import git
from shared.models import Agent, AgentStatus, Iteration, IterationStatus, Message, Task
from shared.project_config import ProjectConfig

# A diff longer than this is cut (the page stays usable; `raas diff` has the whole).
DIFF_CHARS = 200_000


class AgentOverview(BaseModel):
    id: str
    project_id: str
    category: str
    status: AgentStatus
    depth: int
    parent_id: str | None
    task: str | None
    iterations: int
    calls: int
    tokens: Tokens
    cost_usd: Decimal
    report: str | None


class ChangedFile(BaseModel):
    path: str
    change: str
    """new, deleted, renamed (from ``old_path``), modified, ..."""
    old_path: str | None = None


class IterationDiff(BaseModel):
    number: int
    attempt: int
    status: IterationStatus
    summary: str | None
    files: list[ChangedFile]
    diff: str | None
    """None when the iteration committed nothing."""


class AgentOutputs(BaseModel):
    iterations: list[IterationDiff]
    files: list[ChangedFile]
    """The workspace since its first commit."""
    diff: str


class AgentConfig(BaseModel):
    category: str
    model: str
    harness: str | None
    tools: list[str] | None
    parallel: bool
    prompt: str | None
    """The category's prompt template; an agent spawned with a prompt of its own shows that."""
    settings: dict[str, Any]


def _agent_row(session: Any, project_id: str, agent_id: str) -> Agent:
    agent = session.get(Agent, agent_id)
    if agent is None or agent.project_id != project_id:
        msg = f"no agent {agent_id!r} in project {project_id}"
        raise NotFound(msg)
    return agent


def agent_overview(project_id: str, agent_id: str) -> AgentOverview:
    with session_scope() as session:
        get_project_row(session, project_id)
        agent = _agent_row(session, project_id, agent_id)
        sums = session.execute(
            select(*CALL_SUMS).where(Message.agent_id == agent_id, Message.role == "assistant")
        ).one()
        line = cost_line(agent_id, tuple(sums))
        task = session.scalar(select(Task.key).where(Task.id == agent.task_id)) if agent.task_id else None
        return AgentOverview(
            id=agent.id,
            project_id=project_id,
            category=agent.category,
            status=agent.status,
            depth=agent.depth,
            parent_id=agent.parent_id,
            task=task,
            iterations=agent.iterations,
            calls=line.calls,
            tokens=line.tokens,
            cost_usd=line.cost_usd,
            report=agent.report,
        )


_CHANGES = {"A": "new", "D": "deleted", "R": "renamed", "M": "modified", "C": "copied", "T": "type changed"}


def changed_files(repo: Path, base: str, new: str) -> list[ChangedFile]:
    """The files between two commits, renames found (``git diff -M --name-status``)."""
    files = []
    for line in git(repo, "diff", "-M", "--name-status", base, new).splitlines():
        parts = line.split("\t")
        change = _CHANGES.get(parts[0][:1], parts[0])
        if parts[0].startswith(("R", "C")) and len(parts) == 3:
            files.append(ChangedFile(path=parts[2], change=change, old_path=parts[1]))
        elif len(parts) >= 2:
            files.append(ChangedFile(path=parts[1], change=change))
    return files


def _cut(text: str) -> str:
    return text if len(text) <= DIFF_CHARS else text[:DIFF_CHARS] + "\n… (cut; `raas diff` shows all)\n"


def agent_outputs(store: WorkspaceStore, project_id: str, agent_id: str) -> AgentOutputs:
    with session_scope() as session:
        get_project_row(session, project_id)
        _agent_row(session, project_id, agent_id)
        iterations = session.scalars(
            select(Iteration).where(Iteration.agent_id == agent_id).order_by(Iteration.number)
        ).all()
        spans = [
            (it.number, it.attempt, it.status, it.summary, it.base_sha, it.commit_sha) for it in iterations
        ]
    repo = store.read(project_id)
    diffs = []
    for number, attempt, status, summary, base, commit in spans:
        files: list[ChangedFile] = []
        text = None
        if base and commit and base != commit:
            try:
                files = changed_files(repo, base, commit)
                text = _cut(git(repo, "diff", "-M", base, commit))
            except GitError:
                text = None
        diffs.append(
            IterationDiff(
                number=number, attempt=attempt, status=status, summary=summary, files=files, diff=text
            )
        )
    root = workspace.root_commit(repo)
    return AgentOutputs(
        iterations=diffs,
        files=changed_files(repo, root, "main"),
        diff=_cut(git(repo, "diff", "-M", root, "main")),
    )


def agent_config(project_id: str, agent_id: str) -> AgentConfig:
    with session_scope() as session:
        project = get_project_row(session, project_id)
        agent = _agent_row(session, project_id, agent_id)
        config = ProjectConfig.model_validate(project.config)
        category = config.category(agent.category)
        own_prompt = agent.prompt
    settings = category.model_dump(mode="json")
    harness = settings.get("harness") or config.model_dump(mode="json").get("harness")
    return AgentConfig(
        category=agent.category,
        model=config.model_for(agent.category),
        harness=str(harness) if harness else None,
        tools=category.tools,
        parallel=category.parallel,
        prompt=own_prompt or category.prompt,
        settings=settings,
    )


def task_attempts(project_id: str) -> dict[str, dict[str, Any]]:
    """Per task key: its iterations, the most attempts any of them took, and its cost."""
    with session_scope() as session:
        rows = session.execute(
            select(
                Task.key,
                func.count(Iteration.id),
                func.coalesce(func.max(Iteration.attempt), 0),
                func.coalesce(func.sum(Iteration.cost_usd), 0),
            )
            .join(Agent, Agent.task_id == Task.id)
            .join(Iteration, Iteration.agent_id == Agent.id)
            .where(Task.project_id == project_id)
            .group_by(Task.key)
        ).all()
    return {key: {"iterations": n, "attempts": a, "cost_usd": str(Decimal(c))} for key, n, a, c in rows}
