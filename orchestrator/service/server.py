"""``raas coordinator``: the HTTP API and the consumer of the ``coordinator`` queue, one process.

Any number of them run side by side against one database and broker (active-active replicas
behind a load balancer, docs/deploy.md): each serves every route and consumes the queue; the
reconcile loop runs on the one holding its lease (orchestrator.scheduling.lease). A replica
refuses to start on a database whose schema is newer than its code (shared.migrate) or with a
RAAS_SECRET_KEY other than the other replicas' (orchestrator.service.cluster).

``GET /healthz`` is liveness (the process answers); ``GET /readyz`` readiness: 503 from the
moment a replica is told to stop (SIGTERM) while it drains for RAAS_DRAIN_S, so that its load
balancer sends new requests to the others before it goes.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn
from celery.signals import worker_shutting_down
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from orchestrator.api import create_app
from orchestrator.dashboard import DashboardOptions, close_streams, mount_dashboard
from orchestrator.delivery.poll import PrPoller
from orchestrator.evals.driver import CeleryVerifier, EvalDriver
from orchestrator.notify.sender import NotificationSender
from orchestrator.queries.workers import inspect_workers
from orchestrator.scheduling.dispatch import CeleryDispatcher
from orchestrator.scheduling.lease import RECONCILE, DatabaseLease, request_resume
from orchestrator.scheduling.reconcile import Reconciler
from orchestrator.scheduling.worker_watch import CeleryConsumers
from orchestrator.service.cluster import check_secret_key
from orchestrator.triggers.clock import TriggerClock
from orchestrator.triggers.launch import CeleryLauncher
from orchestrator.workspaces import check_store
from shared.celery_app import COORDINATOR_QUEUE, app, run_worker_main
from shared.errors import InvalidInput
from shared.events import RedisBus
from shared.migrate import upgrade
from shared.settings import DEV_TOKEN, get_settings

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
API_STOP_S = 10.0
"""How long a stopping coordinator waits for its API's open requests to finish."""


def _terminate(celery_task_id: str) -> None:
    # SIGKILL: the iteration is already recorded as ended; nothing of it is worth saving.
    app.control.revoke(celery_task_id, terminate=True, signal="SIGKILL")


class Drain:
    """Whether this replica is stopping: set by Celery's warm shutdown (SIGTERM, SIGINT)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.since = 0.0

    def begin(self, **_signal: object) -> None:
        if not self.started.is_set():
            self.since = time.monotonic()
            self.started.set()
            log.info("draining: GET /readyz answers 503 from now on")

    def finish(self, drain_s: float) -> None:
        """Wait out the rest of ``drain_s`` since the drain began (the API still answers)."""
        self.begin()
        time.sleep(max(0.0, self.since + drain_s - time.monotonic()))


def _serve_readiness(api: FastAPI, drain: Drain) -> None:
    @api.get("/readyz", include_in_schema=False)
    def ready() -> JSONResponse:
        if drain.started.is_set():
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ready"})


def run_coordinator(host: str, port: int, concurrency: int = 4, *, adopt_secret_key: bool = False) -> None:
    """Serve the API in a thread and consume the coordinator queue in the main thread.

    Celery owns the main thread so that its signal handling (warm shutdown on SIGTERM) works;
    the API stops when the consumer does, RAAS_DRAIN_S after the signal at the earliest.

    Raises:
        InvalidInput: the API token is the default on a public address, the database's schema is
            newer than this code, RAAS_SECRET_KEY differs from the other replicas', or the
            workspace store's bucket is missing.
        ServiceUnavailable: the workspace store (RAAS_WORKSPACE_STORE) does not answer.
    """
    settings = get_settings()
    if host not in LOOPBACK and settings.api_token.get_secret_value() == DEV_TOKEN:
        msg = f"refusing to listen on {host} with the default API token; set RAAS_API_TOKEN to a secret"
        raise InvalidInput(msg)
    check_store(settings)
    upgrade(settings.database_url)
    check_secret_key(settings, adopt=adopt_secret_key)
    settings.workspaces_dir().mkdir(parents=True, exist_ok=True)
    dispatcher, bus = CeleryDispatcher(app), RedisBus(settings.redis_url)
    api = mount_dashboard(
        create_app(settings, dispatcher, bus),
        DashboardOptions(workers=lambda: inspect_workers(app), flower_url=settings.flower_url),
    )
    drain = Drain()
    _serve_readiness(api, drain)
    server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="info"))
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    stop_reconciling = threading.Event()

    def draining(**_signal: object) -> None:
        drain.begin()
        stop_reconciling.set()  # the lease is given back at once: another replica reconciles

    worker_shutting_down.connect(draining, weak=False)
    # Messages the replica this one replaces sent may have died with it: the lease's holder resumes.
    request_resume(RECONCILE)
    reconciler = Reconciler(settings, dispatcher, bus, terminate=_terminate, consumers=CeleryConsumers(app))
    lease = DatabaseLease(RECONCILE, settings.lease_s)
    threading.Thread(
        target=reconciler.loop, args=(stop_reconciling, lease), name="reconcile", daemon=True
    ).start()
    # Every replica runs the trigger clock: a schedule slot and a run are claimed in the database.
    clock = TriggerClock(CeleryLauncher(app))
    threading.Thread(target=clock.loop, args=(stop_reconciling,), name="triggers", daemon=True).start()
    # Every replica sends notifications: a claim per row keeps them from sending one twice.
    sender = NotificationSender(settings)
    threading.Thread(target=sender.loop, args=(stop_reconciling,), name="notify", daemon=True).start()
    # Every replica polls followed pull requests: each poll is claimed in the database.
    poller = PrPoller(settings, dispatcher, bus)
    threading.Thread(target=poller.loop, args=(stop_reconciling,), name="pr-poll", daemon=True).start()
    # Every replica runs the eval driver: a run's row is locked for each pass (SKIP LOCKED).
    evals = EvalDriver(settings, dispatcher, bus, CeleryVerifier(app))
    threading.Thread(target=evals.loop, args=(stop_reconciling,), name="evals", daemon=True).start()
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
        drain.finish(settings.drain_s)
        close_streams(api)  # an open dashboard page's stream would hold uvicorn's shutdown
        server.should_exit = True
        thread.join(timeout=API_STOP_S)
    if thread.is_alive():
        msg = f"the API did not stop within {API_STOP_S:g} s (a request still open); exiting anyway"
        log.error(msg)
        raise SystemExit(1)
