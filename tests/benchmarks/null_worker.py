"""A worker that runs no iteration: it claims each one, records it as ended with a change, and
reports to the coordinator, as ``workers.tasks.run_iteration`` does around a real run.

For bench_replicas' throughput: with no sandbox, model or workspace in between, what limits the
iterations advanced per second is the coordinators' side of the hand-off (the report on the
coordinator queue, ``advance``, admission, the next enqueue), not the workers'. Run as
``celery --app tests.benchmarks.null_worker worker --queues iterations``.
"""

from __future__ import annotations

from celery import Task

from shared.celery_app import ADVANCE_PROJECT, COORDINATOR_QUEUE, RUN_ITERATION, app
from workers import records
from workers.claim import claim_iteration
from workers.records import Outcome

__all__ = ["app"]


@app.task(name=RUN_ITERATION, bind=True)
def run_iteration(self: Task, project_id: str, iteration_id: str) -> None:
    claim = claim_iteration(iteration_id, self.request.hostname or "null-worker", stale_after_s=3600)
    if claim is not None:
        records.finish(claim, Outcome(summary="nothing", files_changed=["notes.md"]))
    app.send_task(
        ADVANCE_PROJECT,
        kwargs={"project_id": project_id, "iteration_id": iteration_id},
        queue=COORDINATOR_QUEUE,
    )
