"""Pull requests the service follows: an event on one reported by hand or by a CI system that is
not the forge's (``raas feedback``), taken as the forge's webhook or the poller's would be
(orchestrator.scheduling.feedback). A pull request no project of the caller follows is a 404 and
changes nothing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.api.deps import Caller, Ctx, authed_router
from orchestrator.scheduling.feedback import PrEvent, report_pr_event
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from shared.models import ProjectStatus

router = authed_router()


class PrFeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo: str = Field(
        min_length=3, max_length=1000, pattern=r"^[^\x00]*$", description="owner/name as the forge spells it"
    )
    # (at most what the database's integer holds)
    number: int = Field(ge=1, le=2**31 - 1, description="The pull request's (or merge request's) number")
    event: PrEvent


class PrFeedbackOut(BaseModel):
    project_id: str
    status: ProjectStatus
    status_line: str | None


@router.post("/pull-requests/feedback", status_code=202)
def report_feedback(body: PrFeedbackIn, ctx: Ctx, caller: Caller) -> PrFeedbackOut:
    with transaction(ctx.dispatcher, ctx.bus) as out:
        project_id = report_pr_event(
            out, caller.tenant_id, repo=body.repo, pr_number=body.number, event=body.event
        )
        project = get_project_row(out.session, project_id)
        return PrFeedbackOut(project_id=project_id, status=project.status, status_line=project.status_line)
