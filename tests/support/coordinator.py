"""The coordinator's state machine on a migrated SQLite file, for specs of its own rules.

No service runs: the database is a file (the embedded mode's), the dispatcher only remembers
what was enqueued, events go nowhere. An iteration "runs" the way a worker records it — the
real ``claim_iteration`` and ``records.finish`` — with the outcome the spec chooses, and the real
``advance`` decides what comes next. No model, no sandbox, no git.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import select

from orchestrator.scheduling import advance, submission
from shared.db import forget_engines, get_engine, session_scope
from shared.events import NullBus
from shared.migrate import upgrade
from shared.models import Agent, Iteration, IterationStatus, Project, utcnow
from shared.project_config import ProjectConfig
from shared.settings import get_settings
from workers import records
from workers.claim import Claim, claim_iteration
from workers.records import Outcome


def migrated_template(directory: Path) -> Path:
    """An empty database at the head of the migrations, to copy for each spec (migrating takes
    longer than the specs)."""
    path = directory / "template.db"
    upgrade(f"sqlite:///{path}")
    get_engine(f"sqlite:///{path}").dispose()
    return path


@contextmanager
def sqlite_database(template: Path, path: Path) -> Iterator[str]:
    """A fresh copy of ``template`` at ``path``, the process's database until the block ends."""
    shutil.copyfile(template, path)
    url = f"sqlite:///{path}"
    previous = os.environ.get("RAAS_DATABASE_URL")
    os.environ["RAAS_DATABASE_URL"] = url
    get_settings.cache_clear()
    forget_engines()
    try:
        yield url
    finally:
        get_engine(url).dispose()
        if previous is None:
            os.environ.pop("RAAS_DATABASE_URL", None)
        else:
            os.environ["RAAS_DATABASE_URL"] = previous
        get_settings.cache_clear()
        forget_engines()


@dataclass
class RecordingDispatcher:
    """Stands in for Celery: it remembers what the coordinator sent, in order."""

    sent: list[str] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        self.sent.append(iteration_id)

    def enqueue_delivery(self, delivery_id: str) -> None:
        self.deliveries.append(delivery_id)


@dataclass
class Coordinator:
    """Starts projects and plays their workers' part, one iteration at a time."""

    dispatcher: RecordingDispatcher = field(default_factory=RecordingDispatcher)

    def start(self, **config: Any) -> str:
        """A project created with this raas.toml (as keyword arguments) and started."""
        settings = ProjectConfig.model_validate(config)
        with session_scope() as session:
            project = Project(
                name="spec",
                prompt="Do the work.",
                config=settings.model_dump(mode="json"),
                budget_limit_usd=settings.budget.limit_usd,
                created_at=utcnow(),
            )
            session.add(project)
            session.flush()
            project_id = project.id
        submission.start_project(project_id, self.dispatcher, NullBus())
        return project_id

    def run(
        self,
        iteration_id: str,
        *,
        completed: bool = False,
        summary: str | None = None,
        error: str | None = None,
        files_changed: tuple[str, ...] = ("notes.md",),
    ) -> None:
        """The worker's part: claim the iteration, record how it ended; then the coordinator's."""
        claim = self.given(iteration_id)
        outcome = Outcome(
            completed_task=completed, summary=summary, error=error, files_changed=list(files_changed)
        )
        records.finish(claim, outcome)
        advance.advance(claim.project_id, iteration_id, self.dispatcher, NullBus())

    def given(self, iteration_id: str) -> Claim:
        """What a worker is given for the iteration: it is claimed, and goes no further."""
        claim = claim_iteration(iteration_id, "spec-worker", stale_after_s=3600)
        assert claim is not None, f"iteration {iteration_id} could not be claimed"
        return claim

    def run_next(self, **outcome: Any) -> Iteration:
        """Run the oldest iteration sent and not yet run; the row as it was when sent."""
        iteration = self.in_flight()[0]
        self.run(iteration.id, **outcome)
        return iteration

    def in_flight(self) -> list[Iteration]:
        """Iterations sent to the workers and not finished, in the order they were sent."""
        with session_scope() as session:
            rows = {
                row.id: row
                for row in session.scalars(select(Iteration).where(Iteration.id.in_(self.dispatcher.sent)))
                if not row.status.is_finished
            }
        return [rows[i] for i in self.dispatcher.sent if i in rows]

    def category_of(self, iteration: Iteration) -> str:
        with session_scope() as session:
            return session.get_one(Agent, iteration.agent_id).category


def waiting(project_id: str) -> list[Iteration]:
    """Iterations the project holds back: queued, not sent."""
    with session_scope() as session:
        return list(
            session.scalars(
                select(Iteration).where(
                    Iteration.project_id == project_id,
                    Iteration.status == IterationStatus.QUEUED,
                    Iteration.enqueued_at.is_(None),
                )
            )
        )


def reserved_usd(project_id: str) -> Decimal:
    with session_scope() as session:
        return session.get_one(Project, project_id).reserved_usd
