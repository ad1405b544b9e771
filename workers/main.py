"""``raas worker``: a Celery worker on the ``iterations`` queue, plus its sandbox sweeper."""

from __future__ import annotations

import socket
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from shared.celery_app import ITERATIONS_QUEUE, app
from workers.sandbox.sweeper import sweep_forever

_stop_sweeping = threading.Event()


@worker_ready.connect
def _start_sweeper(**_kwargs: Any) -> None:
    threading.Thread(
        target=sweep_forever, args=(_stop_sweeping,), name="sandbox-sweeper", daemon=True
    ).start()


@worker_shutdown.connect
def _stop_sweeper(**_kwargs: Any) -> None:
    _stop_sweeping.set()


def run_worker(concurrency: int, name: str | None = None) -> None:
    import workers.tasks  # noqa: F401  (registers run_iteration)

    app.worker_main(
        [
            "worker",
            "--queues",
            ITERATIONS_QUEUE,
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--hostname",
            name or f"iterations@{socket.gethostname()}",
            "--loglevel",
            "INFO",
        ]
    )
