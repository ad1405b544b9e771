"""What the coordinator replicas of one database share about themselves, rather than about work.

``leases``: one row per singleton duty (the reconcile loop), naming the replica that holds it
until ``expires_at`` (database time); ``epoch`` grows by one at every change of holder, so a
replica knows it has just *taken* the duty (and resumes, see orchestrator.scheduling.reconcile);
``resume_requested_at`` is how a replica that starts asks the holder for such a pass.
``cluster_facts``: values every replica must agree on, written by the first to start (the
fingerprint of RAAS_SECRET_KEY; orchestrator.service.replicas).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base


class Lease(Base):
    """A singleton duty and the replica holding it: taken when free or expired, renewed by its
    holder before it expires, given back when the holder stops (orchestrator.scheduling.lease)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Set by a replica that starts; the holder resumes once for each (see request_resume).
    resume_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ClusterFact(Base):
    """A value the replicas must share (e.g. ``secret_key_fingerprint``), set by the first."""

    __tablename__ = "cluster_facts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))
