"""The Celery app both sides use (DESIGN.md rule 3: at-least-once delivery).

Tasks are sent by name, so the coordinator never imports worker code and vice versa. State
lives in Postgres; results are ignored.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from shared.settings import Settings, get_settings

RUN_ITERATION = "raas.run_iteration"
ADVANCE_PROJECT = "raas.advance_project"

COORDINATOR_QUEUE = "coordinator"
ITERATIONS_QUEUE = "iterations"

# Above the longest iteration's hard time limit, or Redis redelivers a running iteration
# to a second worker (celery#5935).
ITERATION_TIME_LIMIT_S = 3600
VISIBILITY_TIMEOUT_S = ITERATION_TIME_LIMIT_S * 2


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("constellation", broker=settings.broker_url)
    app.conf.update(
        task_acks_late=True,
        # acks_late alone still acks when the child is killed; this requeues instead.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Without it a late-acked task runs twice per broker connection loss.
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        result_backend=None,
        task_queues=(Queue(COORDINATOR_QUEUE), Queue(ITERATIONS_QUEUE)),
        task_default_queue=COORDINATOR_QUEUE,
        task_routes={
            RUN_ITERATION: {"queue": ITERATIONS_QUEUE},
            ADVANCE_PROJECT: {"queue": COORDINATOR_QUEUE},
        },
        task_time_limit=ITERATION_TIME_LIMIT_S,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


app = make_celery()
