"""The Celery app both sides use (DESIGN.md rule 3: at-least-once delivery).

Tasks are sent by name, so the coordinator never imports worker code and vice versa. State
lives in Postgres; results are ignored.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery
from celery.signals import worker_shutdown
from kombu import Queue
from kombu.transport import redis as kombu_redis

from shared.settings import Settings, get_settings

RUN_ITERATION = "raas.run_iteration"
ADVANCE_PROJECT = "raas.advance_project"
DELIVER = "raas.deliver"  # a delivery (orchestrator.delivery), run by the coordinator
EVAL_VERIFY = "raas.eval_verify"  # an eval attempt's hidden test (workers.evaluation), on a worker
EVAL_CHECK = "raas.eval_check"  # one task of raas eval check --remote (workers.evaluation), on a worker

COORDINATOR_QUEUE = "coordinator"
ITERATIONS_QUEUE = "iterations"
WORKER_QUEUE_PREFIX = "worker."


def worker_queue(worker: str) -> str:
    """The queue only ``worker`` (a Celery node name) consumes, beside the shared one: where a
    task's next iteration goes first, to the worker holding the task's container."""
    return WORKER_QUEUE_PREFIX + worker


# Above the longest iteration's hard time limit, or Redis redelivers a running iteration
# to a second worker (celery#5935).
ITERATION_TIME_LIMIT_S = 3600
VISIBILITY_TIMEOUT_S = ITERATION_TIME_LIMIT_S * 2


def _close_redis_channels_whose_brpop_was_cut() -> None:
    """Let a Redis channel close even when its pending BRPOP read fails on the dead socket.

    Celery 5.7.0 (#10242) handles a lost broker connection with ``connection.collect()`` and then
    ``connection.close()``. kombu 5.7.0's ``Channel.close`` first reads the pending BRPOP reply;
    when the broker died that raises ``ConnectionError``, which ``collect()`` swallows, leaving
    the channel open, and ``collect()`` then detaches the transport. ``close()`` retries the
    channel, whose restore of unacked messages needs the detached transport's URL:
    ``AttributeError: 'NoneType' object has no attribute 'hostname'`` (kombu/transport/redis.py
    ``_connparams``), "Unrecoverable error", and the worker stops. It happens when a task is
    running and a pool slot is free (a BRPOP pending), e.g. concurrency 2 with one iteration.
    Treating that lost reply like an empty one lets the close finish inside ``collect()``, as it
    does when no BRPOP is pending: the worker cancels the running task and reconnects.
    """
    close = kombu_redis.Channel.close
    if getattr(close, "_closes_after_cut_brpop", False):
        return

    @functools.wraps(close)
    def close_after_cut_brpop(self: Any) -> None:
        if self._in_poll:
            try:
                self._brpop_read()  # resets _in_poll, so close() does not read it again
            except (kombu_redis.Empty, *self.connection_errors):
                pass
        close(self)

    close_after_cut_brpop._closes_after_cut_brpop = True  # type: ignore[attr-defined]
    kombu_redis.Channel.close = close_after_cut_brpop  # type: ignore[method-assign]


_close_redis_channels_whose_brpop_was_cut()


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
            DELIVER: {"queue": COORDINATOR_QUEUE},
            EVAL_VERIFY: {"queue": ITERATIONS_QUEUE},
            EVAL_CHECK: {"queue": ITERATIONS_QUEUE},
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


def run_worker_main(argv: list[str]) -> None:
    """``app.worker_main(argv)``, but a worker that stopped on an error exits with its code.

    ``worker_main`` drops the worker's exit code (celery/app/base.py ``start()`` discards what
    click returns), so an "Unrecoverable error" ended the process with status 0 and no supervisor
    restarted it. The shutdown signal carries the code.
    """
    codes: list[int] = []

    def keep(sender: Any = None, **_kwargs: Any) -> None:
        codes.append(getattr(sender, "exitcode", None) or 0)

    worker_shutdown.connect(keep, weak=False)
    try:
        app.worker_main(argv)
    finally:
        worker_shutdown.disconnect(keep)
    if codes and codes[-1]:
        raise SystemExit(codes[-1])
