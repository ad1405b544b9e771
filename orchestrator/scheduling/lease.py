"""A lease in the database for singleton duties: one coordinator replica at a time runs them.

Any number of coordinator replicas serve the API and consume the ``coordinator`` queue side by
side; the reconcile loop must run on exactly one (two would be harmless — each of its steps locks
its rows and a duplicate message is turned away by the iteration's claim — but wasted work, and
its "resume" sends everything again). The ``leases`` row names the holder and an expiry in the
database's clock, so the replicas' clocks need not agree:

- a replica *takes* the lease when it has no row or the row has expired, and the ``epoch`` goes
  up by one: it knows it has just taken over and starts with a resuming pass;
- its holder renews it every quarter of ``RAAS_LEASE_S``, pushing the expiry ``RAAS_LEASE_S``
  ahead; a renewal that finds another holder means the lease was lost (a pause longer than the
  lease): the duty stops at once;
- a holder that stops gives it back (the expiry set to now), so the next replica's tick takes it;
  one that dies (SIGKILL, host lost, partition) leaves it to expire: another replica takes it
  within ``1.25 × RAAS_LEASE_S`` of the last renewal.

A row with an expiry rather than a Postgres advisory lock: an advisory lock ends with its session,
which is quick after a SIGKILL but unbounded after a host or network loss (TCP keepalives
decide), needs a dedicated connection held for ever, and does not survive PgBouncer in transaction
mode. The row gives a documented takeover time whatever killed the holder.

A replica that starts while another holds the lease asks it to resume (``request_resume``): the
starting replica's predecessor may have died between a commit and its message.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum

from sqlalchemy import case, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from shared.db import session_scope
from shared.models import utcnow
from shared.models.cluster import Lease

log = logging.getLogger(__name__)
RECONCILE = "reconcile"
"""The reconcile loop's lease (orchestrator.scheduling.reconcile)."""
RENEWALS_PER_LEASE = 4


class Holding(str, Enum):
    """What a renewal found: the lease was just taken (a new epoch), or kept by this holder."""

    TAKEN = "taken"
    KEPT = "kept"


def holder_name() -> str:
    """This process's name as a holder: host, pid and a random part, so a restarted replica on the
    same host is a new holder (and its taking the lease is a takeover)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _database_now(session: Session) -> datetime:
    # Postgres's clock, shared by every replica; SQLite runs on one machine (the embedded mode).
    if session.get_bind().dialect.name == "postgresql":
        now: datetime = session.execute(select(func.now())).scalar_one()
        return now
    return utcnow()


@dataclass
class DatabaseLease:
    """The lease ``name`` as held (or wanted) by ``holder`` for ``lease_s`` at a time."""

    name: str
    lease_s: float
    holder: str = field(default_factory=holder_name)
    epoch: int | None = None
    """The epoch this holder holds, None while it does not."""
    resumed_at: datetime | None = None
    """When this holder last resumed; a later request (``request_resume``) asks it to again."""

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / RENEWALS_PER_LEASE

    def renew(self) -> Holding | None:
        """Take the lease if it is free or expired, or push its expiry ahead if it is ours.

        Returns:
            TAKEN when this call took it (a new epoch: resume), KEPT when this holder already had
            it, None when another replica holds it.
        """
        with session_scope() as session:
            now = _database_now(session)
            insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
            expires = now + timedelta(seconds=self.lease_s)
            statement = (
                insert(Lease)
                .values(name=self.name, holder=self.holder, epoch=1, expires_at=expires)
                .on_conflict_do_update(
                    index_elements=[Lease.name],
                    set_={
                        "holder": self.holder,
                        "expires_at": expires,
                        "epoch": case((Lease.holder == self.holder, Lease.epoch), else_=Lease.epoch + 1),
                    },
                    where=or_(Lease.holder == self.holder, Lease.expires_at < now),
                )
                .returning(Lease.epoch, Lease.resume_requested_at)
            )
            row = session.execute(statement).one_or_none()
        if row is None:
            if self.epoch is not None:
                log.warning("lost the %s lease (epoch %s) to another replica", self.name, self.epoch)
            self.epoch = None
            return None
        epoch, requested = row
        if requested is not None and requested.tzinfo is None:  # SQLite gives back naive UTC
            requested = requested.replace(tzinfo=UTC)
        taken = epoch != self.epoch
        if taken:
            log.info("took the %s lease (epoch %s) as %s", self.name, epoch, self.holder)
        self.epoch = epoch
        if taken or (requested is not None and (self.resumed_at is None or requested > self.resumed_at)):
            self.resumed_at = now
            return Holding.TAKEN
        return Holding.KEPT

    def release(self) -> None:
        """Give the lease back (a stopping replica): the next replica's tick takes it."""
        if self.epoch is None:
            return
        with session_scope() as session:
            now = _database_now(session)
            session.execute(
                update(Lease)
                .where(Lease.name == self.name, Lease.holder == self.holder)
                .values(expires_at=now)
            )
        log.info("gave back the %s lease (epoch %s)", self.name, self.epoch)
        self.epoch = None


def request_resume(name: str) -> None:
    """Ask the lease's holder for a resuming pass at its next tick (a replica starting: messages
    its predecessor sent may have died with it). No holder yet: the first to take it resumes."""
    with session_scope() as session:
        now = _database_now(session)
        session.execute(update(Lease).where(Lease.name == name).values(resume_requested_at=now))
