"""The embedded engine: ``raas run DIR`` runs one project to its end on this machine, no servers.

It is the distributed system in one process, on the same code paths (DESIGN.md rule 8):

- the database is SQLite at ``$RAAS_DATA_DIR/raas.db``, unless ``RAAS_DATABASE_URL`` is set in
  the environment: an explicit URL (Postgres included) is used as given. Settings are read once
  per process, so :func:`embedded_settings` sets both variables before anything reads them;
- the coordinator API serves on a free loopback port, behind a token made for this run: the
  worker fetches and pushes the workspace over HTTP as a remote worker does (rule 7);
- the Celery hop is a queue drained by worker threads (:class:`ThreadDispatcher`) that do what
  ``run_iteration`` and ``advance_project`` do: ``IterationRunner.run``, then
  ``advance.advance``. The reconcile loop runs too, so a lost advance or a crashed iteration
  recovers the same way, and so does the notification sender (``raas notify``);
- events go to an in-process bus (the live view), not to Redis;
- tools run in Docker when an engine answers, otherwise in the local sandbox, announced
  (:mod:`workers.sandbox.choice`).
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy.engine import make_url

from orchestrator import delivery
from orchestrator.api import create_app
from orchestrator.dashboard import DashboardOptions, close_streams, mount_dashboard
from orchestrator.dashboard.stream import database_follower
from orchestrator.notify.sender import NotificationSender
from orchestrator.queries import projects
from orchestrator.scheduling import advance, lifecycle, submission
from orchestrator.scheduling.reconcile import Reconciler
from orchestrator.workspaces import get_store
from shared.errors import Conflict, InvalidInput, ServiceUnavailable
from shared.events import EventBus
from shared.migrate import upgrade
from shared.models import ProjectStatus
from shared.schemas import EventOut, ProjectOut
from shared.settings import Settings, get_settings
from workers.iteration import IterationRunner
from workers.sandbox.choice import SandboxChoice

log = logging.getLogger(__name__)
DB_FILE = "raas.db"
SERVER_START_TIMEOUT_S = 20.0
JOIN_TIMEOUT_S = 10.0


def embedded_settings() -> Settings:
    """This process's settings, pointed at the embedded database unless a URL was given.

    Call it before anything reads the settings: ``shared.db`` and the migrations read
    ``get_settings()``, which is cached for the life of the process.
    """
    given = get_settings()
    data_dir = given.data_dir.expanduser().absolute()
    update = {"RAAS_DATA_DIR": str(data_dir)}
    if "database_url" not in given.model_fields_set:
        update["RAAS_DATABASE_URL"] = f"sqlite:///{data_dir / DB_FILE}"
    os.environ.update(update)
    # The embedded mode keeps its workspaces in its own directory, whatever a coordinator uses.
    os.environ.pop("RAAS_WORKSPACE_STORE", None)
    get_settings.cache_clear()
    return get_settings()


class ThreadDispatcher:
    """The Dispatcher of an embedded run: a queue that the engine's worker threads drain.

    It runs one project's iterations only: the reconcile loop sees every project in the
    database, and an earlier run's leftovers must not run (and be paid for) under this one.
    """

    def __init__(self, wake: threading.Event) -> None:
        self.project_id: str | None = None
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._wake = wake
        # Runs a delivery; set by the engine (it holds the settings and the bus).
        self.on_delivery: Callable[[str], None] | None = None
        self.deliveries: list[threading.Thread] = []

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        if project_id != self.project_id:
            log.info("not running iteration %s of project %s here: not this run's", iteration_id, project_id)
            return
        with self._lock:
            self._pending += 1
        self._queue.put((project_id, iteration_id))

    def enqueue_delivery(self, delivery_id: str) -> None:
        """A delivery runs in a thread of its own: it talks to the remote, not to a sandbox."""
        if self.on_delivery is not None:
            thread = threading.Thread(
                target=self.on_delivery, args=(delivery_id,), name="delivery", daemon=True
            )
            with self._lock:
                self.deliveries.append(thread)
            thread.start()

    def wait_deliveries(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s`` in all) for the deliveries started so far; whether all ended."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self.deliveries)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def take(self) -> tuple[str, str] | None:
        """The next iteration to run; None tells a worker thread to end."""
        return self._queue.get()

    def done(self) -> None:
        with self._lock:
            self._pending -= 1
        self._wake.set()

    def idle(self) -> bool:
        """Nothing queued and nothing running."""
        with self._lock:
            return self._pending == 0

    def close(self, workers: int) -> None:
        for _ in range(workers):
            self._queue.put(None)


class _WakingBus:
    """Passes each event on and wakes whoever waits for the run to change."""

    def __init__(self, inner: EventBus, wake: threading.Event) -> None:
        self._inner = inner
        self._wake = wake

    def publish(self, event: EventOut) -> None:
        try:
            self._inner.publish(event)
        except Exception:  # a display problem never stops the run
            log.warning("could not show event %s", event.seq, exc_info=True)
        self._wake.set()


class EmbeddedEngine:
    """Coordinator, worker and reconcile loop of one ``raas run``, in this process.

    Use as a context manager: :meth:`create`, :meth:`begin`, then :meth:`wait` for the end.
    """

    def __init__(
        self,
        settings: Settings,
        sandbox: SandboxChoice,
        bus: EventBus,
        workers: int = 1,
        ui_port: int | None = None,
    ) -> None:
        self.wake = threading.Event()
        self.bus = _WakingBus(bus, self.wake)
        self.dispatcher = ThreadDispatcher(self.wake)
        self.sandbox = sandbox
        self.workers = workers
        # The API answers on loopback only, but other users of this machine can reach it.
        self.settings = settings.model_copy(update={"api_token": SecretStr(secrets.token_urlsafe(24))})
        self.dispatcher.on_delivery = lambda delivery_id: delivery.deliver(
            delivery_id, self.settings, self.bus
        )
        self._server: uvicorn.Server | None = None
        self._ui_port = ui_port
        self.ui_url: str | None = None
        self._ui_server: uvicorn.Server | None = None
        self._ui_app: FastAPI | None = None
        self._threads: list[threading.Thread] = []
        self._stop_reconciling = threading.Event()

    def __enter__(self) -> EmbeddedEngine:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Migrate the database; start the API, the worker threads and the reconcile loop."""
        try:
            upgrade(self.settings.database_url)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            where = make_url(self.settings.database_url).render_as_string(hide_password=True)
            msg = f"cannot prepare the database at {where}: {first}"
            raise ServiceUnavailable(msg) from exc
        self.settings = self.settings.model_copy(update={"coordinator_url": self._serve_api()})
        for index in range(self.workers):
            self._spawn(self._work, f"embedded-worker-{index}")
        # No consumer probe, so no worker watch: the worker threads are here whenever the engine is.
        reconciler = Reconciler(self.settings, self.dispatcher, self.bus)
        self._spawn(lambda: reconciler.loop(self._stop_reconciling), "embedded-reconcile")
        sender = NotificationSender(self.settings)
        self._spawn(lambda: sender.loop(self._stop_reconciling), "embedded-notify")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _serve_api(self) -> str:
        app = create_app(self.settings, self.dispatcher, self.bus)
        if self._ui_port is not None:
            # raas run --ui: the same app serves the dashboard on the port asked for (loopback).
            self._ui_app = mount_dashboard(app, DashboardOptions(follower=database_follower))
            ui_sock = self._bind(self._ui_port)
            self._ui_server = self._start_server(app, ui_sock, "embedded-ui")
            host, port = ui_sock.getsockname()[:2]
            self.ui_url = f"http://{host}:{port}"
        sock = self._bind(0)
        self._server = self._start_server(app, sock, "embedded-api")
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    @staticmethod
    def _bind(port: int) -> socket.socket:
        # Binding here, not in uvicorn, tells us the port before serving.
        try:
            return socket.create_server(("127.0.0.1", port))
        except OSError as exc:
            msg = f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); pick another port for --ui"
            raise InvalidInput(msg) from exc

    def _start_server(self, app: FastAPI, sock: socket.socket, name: str) -> uvicorn.Server:
        config = uvicorn.Config(
            app,
            log_level="warning",
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                msg = "the embedded coordinator API did not start"
                raise ServiceUnavailable(msg)
            time.sleep(0.01)
        return server

    def _work(self) -> None:
        runner = IterationRunner(
            self.settings, self.bus, f"embedded@{socket.gethostname()}", self.sandbox.factory
        )
        while (item := self.dispatcher.take()) is not None:
            project_id, iteration_id = item
            try:
                runner.run(iteration_id)
                advance.advance(project_id, iteration_id, self.dispatcher, self.bus)
            except Exception:
                # The reconcile loop re-runs or advances it, as it would for a lost worker.
                log.exception("the embedded worker failed on iteration %s", iteration_id)
            finally:
                self.dispatcher.done()

    def close(self) -> None:
        self._stop_reconciling.set()
        self.dispatcher.close(self.workers)
        if self._ui_app is not None:  # an open page's stream would hold the server's shutdown
            close_streams(self._ui_app)
        for server in (self._server, self._ui_server):
            if server is not None:
                server.should_exit = True
        # Quitting without waiting leaves a worker mid-step: do not wait for it either.
        timeout_s = JOIN_TIMEOUT_S if self.dispatcher.idle() else 0.1
        for thread in self._threads:
            thread.join(timeout_s)

    def create(self, directory: Path, archive: Path) -> ProjectOut:
        """Create the project from ``archive`` (``directory``, packed); this run runs only it."""
        project = submission.create_project(
            get_store(self.settings), archive, directory.resolve().name, self.bus
        )
        self.dispatcher.project_id = project.id
        return project

    def begin(self, project_id: str) -> ProjectOut:
        """Start the project: its first iteration is enqueued."""
        return submission.start_project(project_id, self.dispatcher, self.bus)

    def wait(self, project_id: str) -> ProjectOut:
        """Block until the project is no longer running and nothing of it runs."""
        while True:
            self.wake.wait(1.0)
            self.wake.clear()
            if self.dispatcher.idle():
                project = projects.get_project(project_id)
                if project.status not in (ProjectStatus.RUNNING, ProjectStatus.CREATED):
                    return project

    def stop(self, project_id: str) -> None:
        """Stop the project: running iterations end after their current LLM call or tool."""
        try:
            lifecycle.stop_project(project_id, self.dispatcher, self.bus)
        except Conflict:
            log.info("project %s had ended already", project_id)

    def remove_sandboxes(self, project_id: str) -> list[str]:
        """Force-remove the project's sandbox containers (when quitting without waiting)."""
        if self.sandbox.kind != "docker":
            return []
        import docker

        from workers.sandbox.reaper import reap

        client = docker.from_env(timeout=10)
        try:
            return reap(client, lambda labels: labels.get("raas.project") != project_id)
        finally:
            client.close()


def prepare_data_dir(settings: Settings) -> None:
    """Create the data directory's workspaces and scratch folders (the last check of a run).

    Raises:
        InvalidInput: they cannot be created or written.
    """
    path = settings.data_dir
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(f"{existing} is not a writable directory")  # noqa: EM102
        for folder in (settings.workspaces_dir(), settings.scratch_dir()):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot use the data directory {path} ({exc}); set RAAS_DATA_DIR to a directory you can write"
        raise InvalidInput(msg) from exc
