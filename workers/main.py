"""``raas worker``: a Celery worker on the ``iterations`` queue, plus its sandbox sweeper."""

from __future__ import annotations

import socket
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from shared.celery_app import ITERATIONS_QUEUE, app
from workers.sandbox.sweeper import sweep_forever

_stop_sweeping = threading.Event()
# app.worker_main() drops the worker's exit code (celery/app/base.py start() discards what
# click returns), so an "Unrecoverable error" ended `raas worker` with status 0 and no supervisor
# restarted it. The shutdown signal carries the code; run_worker() exits with it.
_exit_code: list[int] = []


@worker_ready.connect
def _start_sweeper(**_kwargs: Any) -> None:
    threading.Thread(
        target=sweep_forever, args=(_stop_sweeping,), name="sandbox-sweeper", daemon=True
    ).start()


@worker_shutdown.connect
def _stop_sweeper(sender: Any = None, **_kwargs: Any) -> None:
    _stop_sweeping.set()
    _exit_code.append(getattr(sender, "exitcode", None) or 0)


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
    if _exit_code and _exit_code[-1]:
        raise SystemExit(_exit_code[-1])
