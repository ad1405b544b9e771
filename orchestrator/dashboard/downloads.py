"""What a project's page offers to take away: the workspace (``main``'s files as a tar), the
transcript (markdown, JSON or scg, as ``raas transcript`` writes them), the project's diff, and
each agent's diff — only what that agent committed, its iterations' commits one after another —
as a file or coloured (an HTML fragment for the inspector, and a page of every agent's).

The session must be allowed to see the project: another tenant's answers the 404 page, as an
unknown one does. ``templates/_downloads.html`` is the links, for the project page to include.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from pydantic import BaseModel
from sqlalchemy import select
from starlette.background import BackgroundTask

from orchestrator.dashboard.render import render
from orchestrator.dashboard.views import Ctx, ProjectSigned, as_page
from orchestrator.queries import projects
from orchestrator.scheduling import workspace
from orchestrator.transcripts import render as transcript_render
from orchestrator.transcripts import scg
from orchestrator.transcripts.model import Transcript, to_json
from orchestrator.transcripts.store import load_transcript
from orchestrator.workspaces import WorkspaceStore
from shared.db import session_scope
from shared.errors import NotFound, PageNotFound
from shared.git import git
from shared.models import Agent, Iteration

router = APIRouter(include_in_schema=False)
SHOWN_DIFF_CHARS = 200_000
"""A coloured diff longer than this is cut (the page stays usable; the download has it whole)."""
TRANSCRIPTS: dict[str, tuple[Callable[[Transcript], str], str]] = {
    "md": (transcript_render.to_markdown, "text/markdown; charset=utf-8"),
    "json": (to_json, "application/json"),
    "scg": (scg.write, "text/plain; charset=utf-8"),
}


class IterationPatch(BaseModel):
    """What one iteration of an agent committed."""

    number: int
    attempt: int
    summary: str | None
    diff: str


class AgentPatches(BaseModel):
    id: str
    category: str
    iterations: list[IterationPatch]


def agent_patches(store: WorkspaceStore, project_id: str, agent_id: str) -> AgentPatches:
    """Each of the agent's iterations that committed, with the diff of its own commits
    (``base_sha..commit_sha``): what others committed between its iterations is not in it.

    Raises:
        NotFound: no such agent in this project.
    """
    with session_scope() as session:
        agent = session.get(Agent, agent_id)
        if agent is None or agent.project_id != project_id:
            msg = f"project {project_id} has no agent {agent_id}"
            raise NotFound(msg)
        category = agent.category
        spans = session.execute(
            select(
                Iteration.number,
                Iteration.attempt,
                Iteration.summary,
                Iteration.base_sha,
                Iteration.commit_sha,
            )
            .where(Iteration.agent_id == agent_id)
            .order_by(Iteration.number, Iteration.attempt)
        ).all()
    repo = store.read(project_id)
    patches = [
        IterationPatch(
            number=number, attempt=attempt, summary=summary, diff=git(repo, "diff", "-M", base, commit)
        )
        for number, attempt, summary, base, commit in spans
        if base and commit and base != commit
    ]
    return AgentPatches(id=agent_id, category=category, iterations=patches)


def _patch_text(patches: AgentPatches) -> str:
    return "".join(
        f"# iteration {it.number} (attempt {it.attempt}): {it.summary or 'no summary'}\n{it.diff}"
        for it in patches.iterations
    )


def diff_lines(text: str) -> list[tuple[str, str]]:
    """Each line of a diff with its kind (``file``, ``hunk``, ``add``, ``del``, ``ctx``), for colour."""
    if len(text) > SHOWN_DIFF_CHARS:
        text = text[:SHOWN_DIFF_CHARS] + "\n… (cut here; download the diff for all of it)\n"
    lines = []
    for line in text.splitlines():
        if line.startswith(("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file", "rename ")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append((kind, line))
    return lines


def _attachment(text: str, media_type: str, filename: str) -> Response:
    disposition = f'attachment; filename="{filename}"'
    return PlainTextResponse(text, media_type=media_type, headers={"content-disposition": disposition})


@router.get("/projects/{project_id}/downloads/workspace.tar")
def workspace_tar(project_id: str, ctx: Ctx, session: ProjectSigned) -> FileResponse:
    """``main``'s files as a tar (``git archive``), as ``GET /v1/projects/{id}/workspace.tar``."""
    tmp = Path(tempfile.mkdtemp(prefix="raas-dash-tar-"))
    try:
        with as_page():
            projects.get_project(project_id)
        workspace.write_archive(ctx.workspaces.read(project_id), tmp / "workspace.tar")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(
        tmp / "workspace.tar",
        media_type="application/x-tar",
        filename=f"{project_id}.tar",
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )


@router.get("/projects/{project_id}/downloads/transcript.{fmt}")
def transcript_file(project_id: str, fmt: str, session: ProjectSigned) -> Response:
    if fmt not in TRANSCRIPTS:
        msg = f"no transcript format {fmt!r}; use md, json or scg"
        raise PageNotFound(msg)
    write, media_type = TRANSCRIPTS[fmt]
    with as_page():
        text = write(load_transcript(project_id))
    return _attachment(text, media_type, f"{project_id}-transcript.{fmt}")


@router.get("/projects/{project_id}/downloads/project.diff")
def project_diff(project_id: str, ctx: Ctx, session: ProjectSigned) -> Response:
    """Everything the project changed since its first commit (``raas diff``)."""
    with as_page():
        text = projects.project_diff(ctx.workspaces, project_id, None)
    return _attachment(text, "text/x-diff; charset=utf-8", f"{project_id}.diff")


@router.get("/projects/{project_id}/downloads/agents/{agent_id}.diff")
def agent_diff_file(project_id: str, agent_id: str, ctx: Ctx, session: ProjectSigned) -> Response:
    with as_page():
        patches = agent_patches(ctx.workspaces, project_id, agent_id)
    return _attachment(_patch_text(patches), "text/x-diff; charset=utf-8", f"{project_id}-{agent_id}.diff")


@router.get("/ui/projects/{project_id}/agents/{agent_id}/diff")
def agent_diff_fragment(project_id: str, agent_id: str, ctx: Ctx, session: ProjectSigned) -> HTMLResponse:
    """The agent's own commits, coloured: for the inspector (htmx swaps it in)."""
    with as_page():
        patches = agent_patches(ctx.workspaces, project_id, agent_id)
    return HTMLResponse(render("_agent_diff.html", project_id=project_id, agent=patches, lines=diff_lines))


@router.get("/projects/{project_id}/diffs")
def agent_diffs_page(project_id: str, ctx: Ctx, session: ProjectSigned) -> HTMLResponse:
    """Every agent's own commits, coloured, one section each (agents that committed nothing say so)."""
    with as_page():
        detail = projects.project_detail(project_id)
        agents = [agent_patches(ctx.workspaces, project_id, agent.id) for agent in detail.agents]
    body = render("diffs.html", session=session, project=detail, agents=agents, lines=diff_lines)
    return HTMLResponse(body)
