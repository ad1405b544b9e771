"""What a coordinator transaction sends out once it has committed: events, iterations, deliveries.

Publishing or enqueueing before the commit would let a follower or a worker look for a row
that is not there yet (or never will be, if the transaction rolls back). A send that fails
after the commit is logged, not raised: the committed rows are the truth, and what was not
sent is sent again from them (a follower reads missed events from the database; the reconcile
loop resends queued iterations and pending deliveries).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy.orm import Session

from orchestrator.scheduling.dispatch import Dispatcher
from shared import events
from shared.db import session_scope
from shared.events import EventBus, EventData
from shared.models import Delivery, Iteration, IterationStatus, new_id, utcnow
from shared.schemas import EventOut

log = logging.getLogger(__name__)


@dataclass
class Outbox:
    session: Session
    events: list[EventOut] = field(default_factory=list)
    iterations: list[tuple[str, str]] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)
    # Iterations added by this transaction (see ``new_iteration``).
    scheduled: list[Iteration] = field(default_factory=list)
    # Set by a caller that pumps once at its end, so scheduling inside it does not pump again.
    defer_pump: bool = False

    def event(self, project_id: str, payload: EventData, **ids: str | None) -> None:
        self.events.append(events.record(self.session, project_id, payload, **ids))

    def new_iteration(self, project_id: str, agent_id: str, number: int) -> Iteration:
        """A new iteration row; it is sent to the workers only once ``enqueue`` is called.

        Not flushed: ``pump`` finds it in ``scheduled``, and it is inserted with its reservation
        and send time at the commit, in one statement.
        """
        iteration = Iteration(
            id=new_id(),
            project_id=project_id,
            agent_id=agent_id,
            number=number,
            status=IterationStatus.QUEUED,
            reserved_usd=Decimal(0),
            created_at=utcnow(),
        )
        self.session.add(iteration)
        self.scheduled.append(iteration)
        return iteration

    def enqueue(self, project_id: str, iteration: Iteration) -> None:
        iteration.enqueued_at = utcnow()
        self.iterations.append((project_id, iteration.id))

    def deliver(self, delivery: Delivery) -> None:
        """Send the delivery to the coordinator queue once its row is committed."""
        delivery.enqueued_at = utcnow()
        self.deliveries.append(delivery.id)


@contextmanager
def transaction(dispatcher: Dispatcher, bus: EventBus) -> Iterator[Outbox]:
    """A session whose outbox is delivered after the commit, and dropped on rollback."""
    with session_scope() as session:
        outbox = Outbox(session)
        yield outbox
    # Events first: a publish is one Redis round trip, while each iteration's message is two
    # (the task and its task-sent event) and more under load, and most transactions that enqueue
    # (an advance to the next iteration) have no event to publish at all.
    for event in outbox.events:
        bus.publish(event)
    for project_id, iteration_id in outbox.iterations:
        try:
            dispatcher.enqueue_iteration(project_id, iteration_id)
        except Exception:
            # The row is committed, queued with its send time: the reconcile loop sends it again
            # (DESIGN.md rule 3). The caller's change happened; a broker away must not make it
            # answer as if it had not (the chaos soak: a start during a Redis restart got a 500).
            log.warning("could not send iteration %s; the reconcile loop will", iteration_id, exc_info=True)
    for delivery_id in outbox.deliveries:
        try:
            dispatcher.enqueue_delivery(delivery_id)
        except Exception:
            log.warning("could not send delivery %s; the reconcile loop will", delivery_id, exc_info=True)
