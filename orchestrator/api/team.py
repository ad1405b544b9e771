"""The team's routes: say something to a running agent, decide an approval, list what waits for
a person (DESIGN.md rule 13)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from orchestrator.api.deps import Caller, Ctx, authed_router
from orchestrator.scheduling import approvals, decisions, talk
from orchestrator.scheduling.approvals import ApprovalOut, InboxItem
from shared.db import session_scope
from shared.said import SAID_CHARS

router = authed_router()


class SayIn(BaseModel):
    text: str = Field(min_length=1, max_length=SAID_CHARS)
    agent: str | None = Field(default=None, max_length=32, description="An agent's id; none: the next agent")
    now: bool = Field(default=False, description="End the agent's turn after the tool call in flight")


@router.post("/projects/{project_id}/say", status_code=201)
def say(project_id: str, body: SayIn, ctx: Ctx, caller: Caller) -> talk.SaidOut:
    """Leave a message for the project's agent; it reads it at its next turn boundary."""
    return talk.say_to(
        project_id,
        body.text,
        author=caller.name,
        agent_id=body.agent,
        now=body.now,
        dispatcher=ctx.dispatcher,
        bus=ctx.bus,
    )


class ApproveIn(BaseModel):
    reject: bool = Field(default=False, description="Reject it: the agent works on with the comment")
    comment: str | None = Field(default=None, max_length=SAID_CHARS, description="Words the agent reads")


@router.post("/projects/{project_id}/approve")
def approve(project_id: str, body: ApproveIn, ctx: Ctx, caller: Caller) -> ApprovalOut:
    """Approve or reject what the project waits for; 409 when it waits for nothing (a second
    approval: the message names the first's outcome, nothing changes)."""
    return decisions.decide(
        project_id,
        approve=not body.reject,
        comment=body.comment,
        by=caller.name,
        dispatcher=ctx.dispatcher,
        bus=ctx.bus,
    )


@router.get("/approvals")
def waiting_approvals(caller: Caller) -> list[InboxItem]:
    """The approvals the caller's projects wait for (the cluster's token: every project's), the
    soonest deadline first: the dashboard's inbox, ``raas approvals``."""
    with session_scope() as session:
        return approvals.inbox(session, caller.tenant_id)
