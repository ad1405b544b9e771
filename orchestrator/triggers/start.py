"""Starting the run a trigger's delivery (or schedule slot) asked for, from its committed row.

1. Claim and decide, under the trigger's row lock: a run already claimed is left alone (a copy
   of the message), so each row starts at most one project; the limits
   (:mod:`orchestrator.triggers.limits`) start it, queue it, ignore it or refuse it. A refused
   run gets a project created failed, never started, carrying the ``trigger_refused`` event (so
   notifications and ``raas ls --trigger`` see it).
2. Make the project from the template (outside any transaction: a clone takes the network's
   time): PROMPT.md rendered with the delivery's fields as quoted data (shared.triggers.render),
   raas.toml as the trigger holds it, the budget the trigger's per-run one; the files are the
   repository's, or the trigger's uploaded directory's (``store.set_files``), or none.
3. Link the project to the row (a conditional write: only the claim's holder links) and start
   it; then the issue gets its one comment with the run's link.

A review comment on a pull request goes to the feedback loop instead
(``orchestrator.scheduling.feedback.note_pr_event``); one it does not take, on a pull request
the service opened, starts a run on that pull request's branch.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from orchestrator.delivery import issues
from orchestrator.delivery.forges import repo_path
from orchestrator.scheduling import lifecycle, submission, workspace
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.feedback import ReviewComment, ReviewSubmitted, note_pr_event
from orchestrator.scheduling.outbox import Outbox, transaction
from orchestrator.triggers import store
from orchestrator.triggers.limits import Decision, Verdict, decide
from orchestrator.workspaces import get_store
from shared.archive import pack_directory, pack_files
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput, one_line
from shared.event_payloads import TriggerRefused
from shared.events import EventBus
from shared.models import (
    Delivery,
    Project,
    ProjectStatus,
    RunStatus,
    Trigger,
    TriggerRun,
    TriggerStatus,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.settings import Settings
from shared.triggers import TriggerSpec, load_spec, render

log = logging.getLogger(__name__)


def start_run(
    run_id: str,
    settings: Settings,
    dispatcher: Dispatcher,
    bus: EventBus,
    *,
    now: datetime | None = None,
    transport: httpx.BaseTransport | None = None,
) -> RunStatus:
    """Decide and, if allowed, start the run of ``run_id``: its status afterwards. Idempotent."""
    now = now or utcnow()
    with transaction(dispatcher, bus) as out:
        claimed = _claim(out, run_id, now)
    if isinstance(claimed, RunStatus):
        return claimed
    spec, (trigger_id, trigger_name), tenant_id, fields, decision = claimed
    if decision.verdict is Verdict.RESTART and decision.active is not None:
        with contextlib.suppress(Conflict):  # it ended meanwhile
            lifecycle.stop_project(decision.active, dispatcher, bus)
    try:
        project_id = _create(settings, bus, spec, (trigger_id, trigger_name), tenant_id, fields)
    except InvalidInput as exc:
        reason = one_line(exc)
        log.warning("trigger run %s failed: %s", run_id, reason)
        _set(run_id, RunStatus.FAILED, reason)
        return RunStatus.FAILED
    if not _link(run_id, project_id, spec.limits.budget_per_run_usd):
        log.warning("trigger run %s was linked by another start; %s left unstarted", run_id, project_id)
        return RunStatus.STARTED
    submission.start_project(project_id, dispatcher, bus)
    if "issue.number" in fields:
        text = issues.started_text(project_id, settings.coordinator_url)
        issues.note_issue(settings, project_id, text, result=False, transport=transport)
    return RunStatus.STARTED


_Claimed = tuple[TriggerSpec, tuple[str, str], str | None, dict[str, Any], Decision]


def _claim(out: Outbox, run_id: str, now: datetime) -> _Claimed | RunStatus:
    session = out.session
    run = session.get(TriggerRun, run_id)
    if run is None:
        return RunStatus.FAILED
    trigger = session.scalars(select(Trigger).where(Trigger.id == run.trigger_id).with_for_update()).one()
    session.refresh(run, with_for_update=True)
    if run.status not in (RunStatus.RECEIVED, RunStatus.QUEUED):
        return run.status
    spec = load_spec(trigger.spec)
    fields = dict(run.fields)
    if trigger.status is TriggerStatus.PAUSED:
        return _settle(run, RunStatus.IGNORED, "the trigger is paused")
    if "pull_request.branch" in fields:
        if _hand_off(out, fields):
            return _settle(run, RunStatus.HANDED_OFF, "taken by the pull request's feedback loop")
        if not _opened_by_us(out, str(fields["repository"]), int(fields["pull_request.number"])):
            return _settle(run, RunStatus.IGNORED, "a pull request this service did not open")
        spec = spec.model_copy(
            update={"template": spec.template.model_copy(update={"ref": fields["pull_request.branch"]})}
        )
    limits = {"runs_per_hour": spec.limits.runs_per_hour, "runs_per_day": spec.limits.runs_per_day}
    decision = decide(session, trigger, run, limits, now)
    if decision.verdict is Verdict.IGNORE:
        log.info("trigger run %s ignored: %s", run_id, decision.reason)
        return _settle(run, RunStatus.IGNORED, decision.reason)
    if decision.verdict is Verdict.WAIT:
        return _settle(run, RunStatus.QUEUED, decision.reason)
    if decision.verdict is Verdict.REFUSE:
        _refuse(out, trigger, run, spec, decision.reason)
        return RunStatus.REFUSED
    run.status, run.started_at, run.reason = RunStatus.STARTING, now, None
    return spec, (trigger.id, trigger.name), trigger.tenant_id, fields, decision


def _settle(run: TriggerRun, status: RunStatus, reason: str) -> RunStatus:
    run.status, run.reason = status, reason
    return status


def _hand_off(out: Outbox, fields: dict[str, Any]) -> bool:
    review = fields.get("review") or {}
    comments = []
    if review.get("inline"):
        comments = [
            ReviewComment(
                id=str(review["id"]),
                path=review.get("path"),
                line=review.get("line"),
                body=str(review.get("body") or ""),
                author=review.get("author"),
            )
        ]
    state = review.get("state") if review.get("state") in ("changes_requested", "approved") else "commented"
    event = ReviewSubmitted(
        review_id=str(review.get("id") or "review"),
        state=state,
        body="" if review.get("inline") else str(review.get("body") or ""),
        author=review.get("author"),
        comments=comments,
    )
    repo, number = str(fields["repository"]), int(fields["pull_request.number"])
    return note_pr_event(out, repo=repo, pr_number=number, event=event)


def _opened_by_us(out: Outbox, repository: str, number: int) -> bool:
    rows = out.session.scalars(select(Delivery.remote).where(Delivery.pull_request_number == number)).all()
    return any(repo_path(remote).lower() == repository.lower() for remote in rows)


def _refuse(out: Outbox, trigger: Trigger, run: TriggerRun, spec: TriggerSpec, reason: str) -> None:
    log.warning("trigger %s refused run %s: %s", trigger.id, run.id, reason)
    project = Project(
        tenant_id=trigger.tenant_id,
        name=f"{trigger.name} (refused)",
        prompt=render(spec.template.prompt, {**run.fields, "trigger": trigger.name}),
        config=ProjectConfig().model_dump(mode="json"),
        status=ProjectStatus.FAILED,
        status_reason=f"refused by trigger {trigger.name}: {reason}",
        budget_limit_usd=spec.limits.budget_per_run_usd,
        created_at=utcnow(),
        finished_at=utcnow(),
    )
    out.session.add(project)
    out.session.flush()
    run.status, run.reason, run.project_id = RunStatus.REFUSED, reason, project.id
    payload = TriggerRefused(trigger_id=trigger.id, trigger=trigger.name, run_id=run.id, reason=reason)
    out.event(project.id, payload)


def _name(trigger_name: str, fields: dict[str, Any]) -> str:
    if "issue.number" in fields:
        return f"{trigger_name} {fields.get('repository')}#{fields['issue.number']}"[:200]
    if "slot" in fields:
        return f"{trigger_name} {fields['slot']}"
    return trigger_name


def _upload(settings: Settings, spec: TriggerSpec, trigger_id: str, prompt: str, tmp: Path) -> Path:
    """The run's upload: PROMPT.md and raas.toml, over the trigger's directory if it has one."""
    archive, kept = tmp / "upload.tar.gz", store.files_path(settings, trigger_id)
    if spec.template.repo or not kept.is_file():
        archive.write_bytes(pack_files({"PROMPT.md": prompt, "raas.toml": spec.template.config}))
        return archive
    root = tmp / "files"
    root.mkdir()
    workspace.unpack_upload(kept, root)
    (root / "PROMPT.md").write_text(prompt)
    # The directory's raas.toml stays unless the template has one.
    if spec.template.config or not (root / "raas.toml").is_file():
        (root / "raas.toml").write_text(spec.template.config)
    archive.write_bytes(pack_directory(root))
    return archive


def _create(
    settings: Settings,
    bus: EventBus,
    spec: TriggerSpec,
    trigger: tuple[str, str],
    tenant_id: str | None,
    fields: dict[str, Any],
) -> str:
    trigger_id, trigger_name = trigger
    prompt = render(spec.template.prompt, {**fields, "trigger": trigger_name})
    with tempfile.TemporaryDirectory(prefix="raas-trigger-") as tmp:
        archive = _upload(settings, spec, trigger_id, prompt, Path(tmp))
        project = submission.create_project(
            get_store(settings),
            archive,
            _name(trigger_name, fields),
            bus,
            tenant_id=tenant_id,
            network_allowed=settings.sandbox_network_allowed,
            repo=spec.template.repo,
            ref=spec.template.ref,
            settings=settings,
        )
    return project.id


def _link(run_id: str, project_id: str, budget_usd: Decimal) -> bool:
    """The run's project, and the trigger's per-run budget on it; False if the claim was lost."""
    with session_scope() as session:
        linked = session.execute(
            update(TriggerRun)
            .where(
                TriggerRun.id == run_id,
                TriggerRun.status == RunStatus.STARTING,
                TriggerRun.project_id.is_(None),
            )
            .values(status=RunStatus.STARTED, project_id=project_id)
            .returning(TriggerRun.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
        if linked is None:
            return False
        project = session.get_one(Project, project_id)
        config = dict(project.config)
        config["budget"] = {**config.get("budget", {}), "limit_usd": str(budget_usd)}
        project.config, project.budget_limit_usd = config, budget_usd
        return True


def _set(run_id: str, status: RunStatus, reason: str) -> None:
    with session_scope() as session:
        run = session.get_one(TriggerRun, run_id)
        run.status, run.reason = status, reason
