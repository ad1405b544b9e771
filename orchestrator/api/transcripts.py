"""What a project leaves behind: its transcript (every agent's messages), its memory bank and its
final workspace."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import Query
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from orchestrator.api.deps import Ctx, authed_router
from orchestrator.queries import memory, projects
from orchestrator.scheduling import workspace
from orchestrator.transcripts.model import Transcript
from orchestrator.transcripts.store import load_transcript
from shared.memory import QUERY_CHARS
from shared.schemas import MemoryEntryOut

router = authed_router()


@router.get("/projects/{project_id}/transcript")
def project_transcript(project_id: str, agent: str | None = None) -> Transcript:
    """The transcript; with ``agent`` (an id, a unique prefix or ``root``) that agent's conversation."""
    return load_transcript(project_id, agent)


@router.get("/projects/{project_id}/memory")
def project_memory(
    project_id: str,
    search: Annotated[str | None, Query(max_length=QUERY_CHARS)] = None,
    tag: Annotated[list[str] | None, Query()] = None,
    limit: Annotated[int | None, Query(ge=1, le=memory.LIST_LIMIT)] = None,
) -> list[MemoryEntryOut]:
    """The project's memory bank: every key with its current values (and their writers), in key
    order; with ``search``, the keys whose values match it (full text), best first, at most
    ``limit`` (10 by default, 50 at most); ``tag`` (repeatable) keeps values carrying all."""
    if search is None:
        return memory.list_memory(project_id, tag or [], limit or memory.LIST_LIMIT)
    return memory.search_memory(project_id, search, tag or [], limit or 10)


@router.get(
    "/projects/{project_id}/workspace.tar",
    response_class=FileResponse,
    responses={200: {"description": "The files of main, as a tar", "content": {"application/x-tar": {}}}},
)
def final_workspace(project_id: str, ctx: Ctx) -> FileResponse:
    """The files of the workspace's ``main`` branch as a tar (``git archive``).

    Links are in it as the commit holds them; `raas pull` leaves out those that lead outside.
    """
    projects.get_project(project_id)  # a 404 before any work
    tmp = Path(tempfile.mkdtemp(prefix="raas-tar-"))
    archive = tmp / "workspace.tar"
    try:
        workspace.write_archive(ctx.workspaces.read(project_id), archive)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(
        archive,
        media_type="application/x-tar",
        filename=f"{project_id}.tar",
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )
