"""A subagent asked for by an iteration (``spawn_subagent``): recorded now, started by the
coordinator when the iteration ends (only the coordinator enqueues work)."""

from __future__ import annotations

from sqlalchemy import select

from shared.db import session_scope, survives_restarts
from shared.models import Agent, utcnow
from workers.claim import Claim


@survives_restarts
def record_subagent(claim: Claim, category: str, prompt: str, parallel: bool) -> str:
    """Record a subagent asked for by this iteration; the coordinator starts it when the iteration ends."""
    with session_scope() as session:
        agent = Agent(
            project_id=claim.project_id,
            parent_id=claim.agent_id,
            depth=claim.depth + 1,
            category=category,
            parallel=parallel,
            prompt=prompt,
            spawned_by=claim.iteration_id,
            created_at=utcnow(),
            task_id=session.scalar(select(Agent.task_id).where(Agent.id == claim.agent_id)),
        )
        session.add(agent)
        session.flush()
        return agent.id
