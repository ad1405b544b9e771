"""Creating and starting projects: the rules behind submitting one (files, prompt, config, tasks)."""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.scheduling import source as sources
from orchestrator.scheduling import workflows, workspace
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from orchestrator.scheduling.prompt import PROMPT_FILE, read_prompt
from orchestrator.workspaces import WorkspaceStore
from shared import events
from shared.categories import DEFAULT_CATEGORIES
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput
from shared.event_payloads import ProjectCreated, ProjectStarted
from shared.events import EventBus
from shared.harnesses import check_binaries
from shared.models import Project, ProjectStatus, RunStatus, TriggerRun, new_id, utcnow
from shared.project_config import ProjectConfig, SourceConfig, parse_project_config
from shared.project_config.environment import ENVIRONMENT_FILE
from shared.project_config.parse import full_network_key, parse_environment_file
from shared.schemas import ProjectOut
from shared.scud import parse_scg, to_task_specs
from shared.settings import Settings, get_settings

# Service files: read by the coordinator, not part of the agent's workspace.
SCUD_FILE = ".scud/tasks/tasks.scg"
CONFIG_FILE = "raas.toml"


def read_config(root: Path) -> ProjectConfig | None:
    """raas.toml of a project directory, parsed and validated; None when there is none.

    A submission parses its raas.toml once on each side (the CLI, the coordinator) and hands the
    result on: ``read_project_files`` and the source lookup take it instead of parsing again.

    Raises:
        InvalidInput: raas.toml is invalid.
    """
    path = root / CONFIG_FILE
    return (
        parse_project_config(path.read_text(encoding="utf-8"), source=CONFIG_FILE) if path.is_file() else None
    )


def read_project_files(root: Path, config: ProjectConfig | None = None) -> tuple[str, ProjectConfig]:
    """PROMPT.md and raas.toml of an unpacked project directory; ``config`` is its raas.toml when
    the caller has parsed it already (:func:`read_config`), so it is not parsed twice.

    Raises:
        InvalidInput: PROMPT.md is missing, empty or too large, or raas.toml is invalid.
    """
    prompt = read_prompt(root)
    if config is None:
        config = read_config(root) or parse_project_config("", source=CONFIG_FILE)
    return prompt, with_scud_tasks(root, config)


def with_environment_file(root: Path, config: ProjectConfig) -> ProjectConfig:
    """The config with the workspace's ``.raas/environment.toml`` as its ``[environment]``, when
    raas.toml has none of its own (a link is not followed).

    Raises:
        InvalidInput: the file is not valid (one line naming it and the key).
    """
    path = root / ENVIRONMENT_FILE
    if config.environment.active or path.is_symlink() or not path.is_file():
        return config
    environment = parse_environment_file(path.read_text(encoding="utf-8"))
    return config.model_copy(update={"environment": environment})


def check_network(config: ProjectConfig, network_allowed: bool) -> None:
    """Refuse a project that asks for network on a cluster that allows none.

    Raises:
        InvalidInput: naming the key.
    """
    if network_allowed:
        return
    if config.sandbox.network:
        msg = "raas.toml: [sandbox] network = true is not allowed on this cluster; remove it"
        raise InvalidInput(msg)
    key = full_network_key(config.environment)
    if key is not None:
        msg = f'raas.toml: [environment] {key} = "full" is not allowed on this cluster; use "registries"'
        raise InvalidInput(msg)


def with_scud_tasks(root: Path, config: ProjectConfig) -> ProjectConfig:
    """The config with the tasks of the project's SCUD graph, when it has one and no [[tasks]].

    Raises:
        InvalidInput: the SCUD file does not parse, or its graph has a cycle or a dangling edge.
    """
    if config.tasks or config.workflow == "planned":
        return config
    relative = config.scud_file or SCUD_FILE
    path = root / relative
    if not path.is_file():
        if config.scud_file:
            msg = f"raas.toml: scud_file {relative!r} is not a file in the project directory"
            raise InvalidInput(msg)
        return config
    graph = parse_scg(path.read_text(encoding="utf-8"), source=relative)
    specs = to_task_specs(graph, categories={*DEFAULT_CATEGORIES, *config.categories})
    if not specs:
        msg = f"{relative}: every task is already done, cancelled or deferred; nothing to run"
        raise InvalidInput(msg)
    data = {**config.model_dump(mode="json"), "tasks": [t.model_dump() for t in specs], "scud_file": relative}
    try:
        return ProjectConfig.model_validate(data)
    except InvalidInput as exc:
        msg = f"{relative}: {exc}"
        raise InvalidInput(msg) from exc


def create_project(
    store: WorkspaceStore,
    archive: Path,
    name: str | None,
    bus: EventBus,
    *,
    tenant_id: str | None = None,
    network_allowed: bool = True,
    repo: str | None = None,
    ref: str | None = None,
    settings: Settings | None = None,
    project_id: str | None = None,
) -> ProjectOut:
    """Validate an uploaded project, create its workspace repository and its row.

    ``project_id``: the id to give it (the eval driver's, one per attempt, so a start cut by a
    crash is made once); a workspace left under that id by a crash before the row was written is
    replaced. Without it, a new id.

    With ``repo`` (or ``[source] repo`` in the uploaded raas.toml) the workspace is that
    repository's branch and the upload holds at most PROMPT.md and raas.toml, each taken from the
    repository when the upload lacks it (:mod:`orchestrator.scheduling.source`). A harness the
    project asks for must be installed here (RAAS_HARNESS_CACHE; the cluster shares one pin).
    Nothing is written unless the whole upload is valid.
    """
    with tempfile.TemporaryDirectory(prefix="raas-upload-") as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        workspace.unpack_upload(archive, root)
        settings = settings or get_settings()
        source, uploaded = _source_of(root, repo, ref, read_config(root), tenant_id, settings, Path(tmp))
        prompt, config = read_project_files(root, uploaded)
        config = with_environment_file(root, config)
        check_binaries(config.harnesses_in_use(), settings.harness_cache)
        if source is not None:
            repo_source = SourceConfig(repo=source.remote.url, ref=source.ref)
            config = config.model_copy(update={"source": repo_source})
        check_network(config, network_allowed)
        for service_file in (PROMPT_FILE, CONFIG_FILE):
            (root / service_file).unlink(missing_ok=True)
        project = Project(
            id=project_id or new_id(),
            tenant_id=tenant_id,
            name=config.name or name or "project",
            prompt=prompt,
            config=config.model_dump(mode="json"),
            budget_limit_usd=config.budget.limit_usd,
            created_at=utcnow(),
        )
        if source is not None:
            project.source_repo, project.source_ref = source.remote.url, source.ref
            project.source_commit = source.commit
        if project_id is not None:
            store.discard(project_id)  # no row holds it: what is there is a cut-off creation's
        with store.write(project.id) as bare:
            sha = (
                workspace.create_repo(bare, root)
                if source is None
                else sources.create_workspace(bare, source)
            )
    project.workspace_sha = sha
    try:
        with session_scope() as session:
            session.add(project)
            session.flush()
            event = events.record(session, project.id, ProjectCreated(name=project.name))
            out = ProjectOut.model_validate(project)
    except Exception:
        store.discard(project.id)
        raise
    bus.publish(event)
    return out


def _source_of(
    root: Path,
    repo: str | None,
    ref: str | None,
    uploaded: ProjectConfig | None,
    tenant_id: str | None,
    settings: Settings,
    tmp: Path,
) -> tuple[sources.Source | None, ProjectConfig | None]:
    """The repository the project starts from, cloned, with its PROMPT.md and raas.toml (and SCUD
    graph) put in ``root`` where the upload has none; None for a project from an upload alone.
    With it, the project's raas.toml: ``uploaded`` (the upload's, parsed), else the repository's,
    parsed here.

    Raises:
        InvalidInput: the upload holds more than PROMPT.md and raas.toml, or the clone fails
            (see :func:`orchestrator.scheduling.source.clone_source`), or neither the repository
            nor the upload has a PROMPT.md.
    """
    if repo is None and uploaded is not None:
        repo, ref = uploaded.source.repo, ref or uploaded.source.ref
    if repo is None:
        return None, uploaded
    extra = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name not in sources.OVERLAY_FILES
    )
    if extra or any(p.parent != root for p in root.rglob("*") if p.is_file()):
        msg = (
            f"a project from a repository takes only PROMPT.md and raas.toml from the upload "
            f"(got {', '.join(extra[:3]) or 'files in subdirectories'}); commit the rest to the repository"
        )
        raise InvalidInput(msg)
    with session_scope() as session:
        source = sources.clone_source(session, settings, tenant_id, repo, ref, tmp)
    sources.take_service_files(source, root, (PROMPT_FILE, CONFIG_FILE))
    # The upload's raas.toml is kept when it has one; else the repository's, if any, is read now.
    config = uploaded if uploaded is not None else read_config(root)
    scud = config.scud_file if config is not None else None
    sources.take_service_files(source, root, (scud or SCUD_FILE,))
    if not (root / PROMPT_FILE).is_file():
        msg = (
            f"no {PROMPT_FILE}: neither {ref or 'the default branch'} of the repository nor the "
            "command line (--prompt-file, or a directory holding one) has it"
        )
        raise InvalidInput(msg)
    return source, config


def start_project(project_id: str, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    """Expand a created project into its task and root agent and enqueue its first iteration."""
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        if project.status != ProjectStatus.CREATED:
            msg = f"project {project_id} is {project.status.value}; only a created project can be started"
            raise Conflict(msg)
        project.status = ProjectStatus.RUNNING
        project.started_at = utcnow()
        config = ProjectConfig.model_validate(project.config)
        out.event(project.id, ProjectStarted(workflow=config.workflow))
        workflows.expand(out, project, config)
        return ProjectOut.model_validate(project)


def projects_this_hour(session: Session, tenant_id: str, now: datetime) -> int:
    """The projects ``tenant_id`` made in the hour before ``now``: what its ``submissions_per_hour``
    limits, for ``raas submit``, the MCP tools and its triggers alike. A trigger run's refusal is
    recorded as a project that never starts; it is not one the tenant made."""
    refused = select(TriggerRun.project_id).where(
        TriggerRun.status == RunStatus.REFUSED, TriggerRun.project_id.is_not(None)
    )
    return (
        session.scalar(
            select(func.count())
            .select_from(Project)
            .where(
                Project.tenant_id == tenant_id,
                Project.created_at >= now - timedelta(hours=1),
                Project.id.not_in(refused),
            )
        )
        or 0
    )
