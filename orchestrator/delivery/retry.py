"""``raas deliver ID``: try a project's failed deliveries again, from the step that failed."""

from __future__ import annotations

from sqlalchemy import select

from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from shared.errors import Conflict
from shared.events import EventBus
from shared.models import Delivery, DeliveryStatus


def redeliver(project_id: str, dispatcher: Dispatcher, bus: EventBus) -> list[str]:
    """Set the project's failed deliveries pending again and send them; their branches.

    Raises:
        NotFound: no such project.
        Conflict: none of its deliveries failed (nothing to retry).
    """
    with transaction(dispatcher, bus) as out:
        get_project_row(out.session, project_id, lock=True)
        failed = out.session.scalars(
            select(Delivery)
            .where(Delivery.project_id == project_id, Delivery.status == DeliveryStatus.FAILED)
            .order_by(Delivery.created_at)
        ).all()
        if not failed:
            msg = (
                f"project {project_id} has no failed delivery to retry; `raas status {project_id}` shows them"
            )
            raise Conflict(msg)
        for row in failed:
            row.status = DeliveryStatus.PENDING
            out.deliver(row)
        return [row.branch for row in failed]
