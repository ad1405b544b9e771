"""A tenant's triggers: add, list, show, pause, resume, remove; and the runs each made.

A trigger is named by its id or its name, and only its tenant sees it (the cluster token sees
every one); another tenant's gets the answer an unknown one gets. The secret is encrypted with
the operator's key before it is written and never leaves again.

A trigger's template may hold a directory uploaded once (``set_files``): every run starts from
its files, with PROMPT.md rendered from the template (and raas.toml the template's, if it has
one). It is kept as its .tar.gz under the data directory, which every coordinator shares.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime
from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from orchestrator.remotes.credentials import seal
from orchestrator.scheduling import workspace
from orchestrator.triggers.schedule import first_slot
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput, NotFound
from shared.models import Project, Trigger, TriggerRun, TriggerSource, TriggerStatus, utcnow
from shared.project_config import parse_project_config
from shared.schemas import ProjectOut
from shared.settings import Settings
from shared.triggers import TriggerOut, TriggerRunOut, TriggerSpec, load_spec

HOOK_PATH = "/v1/hooks/{trigger_id}"


def files_path(settings: Settings, trigger_id: str) -> Path:
    """Where a trigger's uploaded directory is kept (it may not exist: no directory)."""
    return settings.data_dir / "trigger-files" / f"{trigger_id}.tar.gz"


def _out(trigger: Trigger, settings: Settings | None = None) -> TriggerOut:
    out = TriggerOut.model_validate(trigger)
    out.has_files = settings is not None and files_path(settings, trigger.id).is_file()
    if trigger.source is not TriggerSource.SCHEDULE:
        out.hook_path = HOOK_PATH.format(trigger_id=trigger.id)
    return out


def _find(session: Session, tenant_id: str | None, ref: str, *, lock: bool = False) -> Trigger:
    query = select(Trigger).where(or_(Trigger.id == ref, Trigger.name == ref))
    if tenant_id is not None:
        query = query.where(Trigger.tenant_id == tenant_id)
    found = session.scalars(query.with_for_update() if lock else query).first()
    if found is None:
        msg = f"no trigger {ref!r}; `raas trigger ls` lists yours"
        raise NotFound(msg)
    return found


def add_trigger(spec: TriggerSpec, tenant_id: str | None, settings: Settings) -> TriggerOut:
    """Store a new trigger (its raas.toml checked, its secret encrypted).

    Raises:
        InvalidInput: the template's raas.toml is invalid, or no key is configured for the secret.
        Conflict: the tenant has a trigger of that name.
    """
    parse_project_config(spec.template.config, source="the template's raas.toml")
    secret = seal(settings, spec.secret.get_secret_value()) if spec.secret is not None else None
    now = utcnow()
    with session_scope() as session:
        owner = Trigger.tenant_id.is_(None) if tenant_id is None else Trigger.tenant_id == tenant_id
        if session.scalar(select(Trigger.id).where(owner, Trigger.name == spec.name)) is not None:
            msg = f"a trigger named {spec.name!r} exists already; `raas trigger rm {spec.name}` first"
            raise Conflict(msg)
        trigger = Trigger(
            tenant_id=tenant_id,
            name=spec.name,
            source=spec.source,
            spec=spec.model_dump(mode="json", exclude={"secret"}),
            secret_encrypted=secret,
            on_active=spec.on_active,
            budget_per_run_usd=spec.limits.budget_per_run_usd,
            budget_per_day_usd=spec.limits.budget_per_day_usd,
            max_concurrent=spec.limits.max_concurrent,
            next_slot_at=first_slot(spec, now),
            created_at=now,
        )
        session.add(trigger)
        session.flush()
        return _out(trigger)


def list_triggers(tenant_id: str | None, settings: Settings | None = None) -> list[TriggerOut]:
    query = select(Trigger).order_by(Trigger.created_at.desc())
    if tenant_id is not None:
        query = query.where(Trigger.tenant_id == tenant_id)
    with session_scope() as session:
        return [_out(t, settings) for t in session.scalars(query)]


def show_trigger(tenant_id: str | None, ref: str, settings: Settings | None = None) -> TriggerOut:
    with session_scope() as session:
        return _out(_find(session, tenant_id, ref), settings)


def set_status(
    tenant_id: str | None, ref: str, status: TriggerStatus, now: datetime | None = None
) -> TriggerOut:
    """Pause or resume; a resumed schedule starts again from its next slot (no catch-up)."""
    with session_scope() as session:
        trigger = _find(session, tenant_id, ref, lock=True)
        if status is TriggerStatus.ACTIVE and trigger.status is TriggerStatus.PAUSED:
            trigger.next_slot_at = first_slot(load_spec(trigger.spec), now or utcnow())
        trigger.status = status
        return _out(trigger)


def remove_trigger(tenant_id: str | None, ref: str, settings: Settings | None = None) -> None:
    """Forget a trigger, its delivery rows and its uploaded directory; its projects stay."""
    with session_scope() as session:
        trigger = _find(session, tenant_id, ref, lock=True)
        session.delete(trigger)
        if settings is not None:
            files_path(settings, trigger.id).unlink(missing_ok=True)


def set_files(tenant_id: str | None, ref: str, archive: Path, settings: Settings) -> TriggerOut:
    """Keep ``archive`` (a project directory as .tar.gz) as the directory every run starts from.

    Raises:
        NotFound: the caller has no such trigger.
        InvalidInput: the archive is not a valid upload, or the template names a repository
            (a run starts from a repository or from a directory, not both).
    """
    with tempfile.TemporaryDirectory(prefix="raas-trigger-files-") as tmp:
        workspace.unpack_upload(archive, Path(tmp))  # the checks a project's upload passes
    with session_scope() as session:
        trigger = _find(session, tenant_id, ref, lock=True)
        if load_spec(trigger.spec).template.repo:
            msg = f"trigger {trigger.name!r} starts from its template's repo; a directory is for one without"
            raise InvalidInput(msg)
        kept = files_path(settings, trigger.id)
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(".partial")
        shutil.copyfile(archive, partial)
        partial.replace(kept)  # a run reading it meanwhile sees the old one or the new one, whole
        return _out(trigger, settings)


def trigger_runs(tenant_id: str | None, ref: str, limit: int = 100) -> list[TriggerRunOut]:
    with session_scope() as session:
        trigger = _find(session, tenant_id, ref)
        rows = session.scalars(
            select(TriggerRun)
            .where(TriggerRun.trigger_id == trigger.id)
            .order_by(TriggerRun.created_at.desc())
            .limit(limit)
        )
        return [TriggerRunOut.model_validate(r) for r in rows]


def trigger_projects(tenant_id: str | None, ref: str, limit: int = 100) -> list[ProjectOut]:
    """The projects the trigger's runs made, newest first (``raas ls --trigger``)."""
    with session_scope() as session:
        trigger = _find(session, tenant_id, ref)
        rows = session.scalars(
            select(Project)
            .join(TriggerRun, TriggerRun.project_id == Project.id)
            .where(TriggerRun.trigger_id == trigger.id)
            .order_by(Project.created_at.desc())
            .limit(limit)
        )
        return [ProjectOut.model_validate(p) for p in rows]
