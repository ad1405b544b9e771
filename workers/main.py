"""``raas worker``: a Celery worker on the ``iterations`` queue."""

from __future__ import annotations

import socket

from shared.celery_app import ITERATIONS_QUEUE, app


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
