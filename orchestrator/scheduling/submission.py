"""Creating and starting projects: the rules behind submitting one (files, prompt, config, tasks)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from orchestrator.scheduling import workflows, workspace
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from orchestrator.scheduling.prompt import PROMPT_FILE, read_prompt
from shared import events
from shared.categories import DEFAULT_CATEGORIES
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput
from shared.event_payloads import ProjectCreated, ProjectStarted
from shared.events import EventBus
from shared.models import Project, ProjectStatus, new_id, utcnow
from shared.project_config import ProjectConfig, parse_project_config
from shared.schemas import ProjectOut
from shared.scud import parse_scg, to_task_specs

# Service files: read by the coordinator, not part of the agent's workspace.
SCUD_FILE = ".scud/tasks/tasks.scg"
CONFIG_FILE = "raas.toml"


def read_project_files(root: Path) -> tuple[str, ProjectConfig]:
    """PROMPT.md and raas.toml of an unpacked project directory.

    Raises:
        InvalidInput: PROMPT.md is missing, empty or too large, or raas.toml is invalid.
    """
    prompt = read_prompt(root)
    config_path = root / CONFIG_FILE
    text = config_path.read_text(encoding="utf-8") if config_path.is_file() else ""
    return prompt, with_scud_tasks(root, parse_project_config(text, source=CONFIG_FILE))


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
    workspaces_dir: Path,
    archive: Path,
    name: str | None,
    bus: EventBus,
    *,
    tenant_id: str | None = None,
    network_allowed: bool = True,
) -> ProjectOut:
    """Validate an uploaded project, create its workspace repository and its row.

    Nothing is written unless the whole upload is valid.
    """
    with tempfile.TemporaryDirectory(prefix="raas-upload-") as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        workspace.unpack_upload(archive, root)
        prompt, config = read_project_files(root)
        if config.sandbox.network and not network_allowed:
            msg = "raas.toml: [sandbox] network = true is not allowed on this cluster; remove it"
            raise InvalidInput(msg)
        for service_file in (PROMPT_FILE, CONFIG_FILE):
            (root / service_file).unlink(missing_ok=True)
        project = Project(
            id=new_id(),
            tenant_id=tenant_id,
            name=config.name or name or "project",
            prompt=prompt,
            config=config.model_dump(mode="json"),
            budget_limit_usd=config.budget.limit_usd,
            created_at=utcnow(),
        )
        sha = workspace.create_repo(workspaces_dir, project.id, root)
    project.workspace_sha = sha
    try:
        with session_scope() as session:
            session.add(project)
            session.flush()
            event = events.record(session, project.id, ProjectCreated(name=project.name))
            out = ProjectOut.model_validate(project)
    except Exception:
        shutil.rmtree(workspace.repo_path(workspaces_dir, project.id), ignore_errors=True)
        raise
    bus.publish(event)
    return out


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
