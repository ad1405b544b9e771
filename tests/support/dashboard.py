"""The dashboard under test: the in-process engine of tests.support.engine with the dashboard
mounted, served on a fixed loopback port that a test can stop and start again (a coordinator
restart), and Debian's Chromium driven by Playwright (never ``playwright install``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from orchestrator.api import create_app
from orchestrator.dashboard import DashboardOptions, mount_dashboard
from orchestrator.scheduling import submission
from orchestrator.workspaces import get_store
from shared.events import RedisBus
from shared.settings import get_settings
from tests.support.engine import Engine, RecordingDispatcher, pack
from tests.support.loopback import free_port
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


class Server:
    """uvicorn serving ``app`` on one port, in a thread; ``restart`` drops every connection."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(15)


@contextmanager
def dashboard_engine(script: dict[str, Any], tmp: Path) -> Iterator[tuple[Engine, Server]]:
    """The engine of tests.support.engine (a test runs each iteration itself) whose app also
    serves the dashboard; the server given is the browser's."""
    base = get_settings()
    dispatcher = RecordingDispatcher()
    bus = RedisBus(base.redis_url)
    with ScriptedModelServer(Script.model_validate(script)) as model:
        settings = base.model_copy(update={"anthropic_base_url": model.base_url, "data_dir": tmp / "data"})
        app = mount_dashboard(create_app(settings, dispatcher, bus), DashboardOptions())
        # Two servers of one app: the workers' (never stopped: an iteration fetches and pushes its
        # workspace through it) and the browser's, which a test may restart.
        workers_side, browser_side = Server(app), Server(app)
        workers_side.start()
        browser_side.start()
        try:
            settings = settings.model_copy(update={"coordinator_url": workers_side.url})
            yield (
                Engine(settings=settings, model=model, dispatcher=dispatcher, bus=bus, tmp=tmp),
                browser_side,
            )
        finally:
            browser_side.stop()
            workers_side.stop()


def submit(eng: Engine, raas_toml: str, tenant_id: str | None, files: dict[str, str] | None = None) -> str:
    """A project of ``tenant_id``, created and started as the API would."""
    archive = eng.tmp / f"upload-{time.monotonic_ns()}.tar.gz"
    archive.write_bytes(pack({"PROMPT.md": "Do the task.", "raas.toml": raas_toml, **(files or {})}))
    project = submission.create_project(
        get_store(eng.settings), archive, "dash", eng.bus, tenant_id=tenant_id
    )
    submission.start_project(project.id, eng.dispatcher, eng.bus)
    return project.id
