"""``raas coordinator``: the HTTP API and the consumer of the ``coordinator`` queue, one process."""

from __future__ import annotations

import logging
import socket
import threading

import uvicorn

from orchestrator.api import create_app
from orchestrator.dashboard import DashboardOptions, mount_dashboard
from orchestrator.queries.workers import inspect_workers
from orchestrator.scheduling.dispatch import CeleryDispatcher
from orchestrator.scheduling.reconcile import Reconciler
from orchestrator.scheduling.worker_watch import CeleryConsumers
from shared.celery_app import COORDINATOR_QUEUE, app, run_worker_main
from shared.errors import InvalidInput
from shared.events import RedisBus
from shared.migrate import upgrade
from shared.settings import DEV_TOKEN, get_settings

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _terminate(celery_task_id: str) -> None:
    # SIGKILL: the iteration is already recorded as ended; nothing of it is worth saving.
    app.control.revoke(celery_task_id, terminate=True, signal="SIGKILL")


def run_coordinator(host: str, port: int, concurrency: int = 4) -> None:
    """Serve the API in a thread and consume the coordinator queue in the main thread.

    Celery owns the main thread so that its signal handling (warm shutdown on SIGTERM) works;
    the API stops when the consumer does.
    """
    settings = get_settings()
    if host not in LOOPBACK and settings.api_token.get_secret_value() == DEV_TOKEN:
        msg = f"refusing to listen on {host} with the default API token; set RAAS_API_TOKEN to a secret"
        raise InvalidInput(msg)
    upgrade(settings.database_url)
    settings.workspaces_dir().mkdir(parents=True, exist_ok=True)
    dispatcher, bus = CeleryDispatcher(app), RedisBus(settings.redis_url)
    api = mount_dashboard(
        create_app(settings, dispatcher, bus),
        DashboardOptions(workers=lambda: inspect_workers(app), flower_url=settings.flower_url),
    )
    server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="info"))
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    stop_reconciling = threading.Event()
    reconciler = Reconciler(settings, dispatcher, bus, terminate=_terminate, consumers=CeleryConsumers(app))
    threading.Thread(target=reconciler.loop, args=(stop_reconciling,), name="reconcile", daemon=True).start()
    import orchestrator.service.tasks  # noqa: F401  (registers the coordinator's tasks)

    try:
        run_worker_main(
            [
                "worker",
                "--queues",
                COORDINATOR_QUEUE,
                "--pool",
                "threads",
                "--concurrency",
                str(concurrency),
                "--hostname",
                f"coordinator@{socket.gethostname()}",
                "--loglevel",
                "INFO",
                "--without-mingle",
                "--without-gossip",
            ]
        )
    finally:
        stop_reconciling.set()
        server.should_exit = True
        thread.join(timeout=10)
