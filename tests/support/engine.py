"""An in-process engine for tests: the real coordinator API on a loopback port in a thread,
the real scripted model through the real SDK, real Postgres, Redis and Docker — with the
Celery hop replaced by a dispatcher that records what the coordinator enqueued, so a test can
run each iteration itself, in order, and look at everything in between.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from orchestrator.api import create_app
from orchestrator.scheduling import advance, submission
from orchestrator.workspaces import get_store
from shared.events import RedisBus
from shared.settings import Settings, get_settings
from tests.support.loopback import free_port
from workers.claim import Claim
from workers.iteration import IterationRunner
from workers.llm.ratelimit import RateLimiter
from workers.sandbox.factory import SandboxFactory
from workers.sandbox.pool import SandboxPool
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer


@dataclass
class RecordingDispatcher:
    """Stands in for Celery between coordinator and worker: it only remembers."""

    enqueued: list[tuple[str, str]] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        self.enqueued.append((project_id, iteration_id))

    def enqueue_delivery(self, delivery_id: str) -> None:
        self.deliveries.append(delivery_id)

    def pending(self, project_id: str) -> bool:
        return any(pid == project_id for pid, _ in self.enqueued)

    def take(self, project_id: str) -> str | None:
        for index, (pid, iteration_id) in enumerate(self.enqueued):
            if pid == project_id:
                del self.enqueued[index]
                return iteration_id
        return None


@contextmanager
def serve_app(app: FastAPI) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def pack(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class Engine:
    settings: Settings
    model: ScriptedModelServer
    dispatcher: RecordingDispatcher
    bus: RedisBus
    tmp: Path

    limiter: RateLimiter | None = None
    pool: SandboxPool | None = None
    sandbox_factory: SandboxFactory | None = None  # None: the worker's default, a container each

    def runner(self, worker: str = "test-worker") -> IterationRunner:
        return IterationRunner(
            self.settings,
            self.bus,
            worker,
            sandbox_factory=self.sandbox_factory,
            limiter=self.limiter,
            pool=self.pool,
        )

    def submit(
        self, prompt: str = "Do the task.", raas_toml: str = "", files: dict[str, str] | None = None
    ) -> str:
        archive = self.tmp / f"upload-{time.monotonic_ns()}.tar.gz"
        archive.write_bytes(pack({"PROMPT.md": prompt, "raas.toml": raas_toml, **(files or {})}))
        project = submission.create_project(get_store(self.settings), archive, "test", self.bus)
        submission.start_project(project.id, self.dispatcher, self.bus)
        return project.id

    def run_next(self, project_id: str, worker: str = "test-worker") -> Claim | None:
        """Run the project's next enqueued iteration in-process, then let the coordinator advance."""
        iteration_id = self.dispatcher.take(project_id)
        assert iteration_id is not None, "nothing enqueued for this project"
        runner = self.runner(worker)
        try:
            claim = runner.run(iteration_id)
        finally:
            runner.close()  # its LLM gateway, if a harness iteration made one
        advance.advance(project_id, iteration_id, self.dispatcher, self.bus)
        return claim

    def run_to_end(self, project_id: str, limit: int = 20) -> int:
        runs = 0
        while self.dispatcher.pending(project_id) and runs < limit:
            self.run_next(project_id)
            runs += 1
        return runs

    def requests(self, project_id: str) -> list[Any]:
        return self.model.requests(project_id)


@contextmanager
def engine(script: dict[str, Any], tmp: Path, **settings_overrides: Any) -> Iterator[Engine]:
    """A running in-process engine answering from ``script`` (a scripted-model script as a dict)."""
    base = get_settings()
    dispatcher = RecordingDispatcher()
    bus = RedisBus(base.redis_url)
    with ScriptedModelServer(Script.model_validate(script)) as model:
        settings = base.model_copy(
            update={"anthropic_base_url": model.base_url, "data_dir": tmp / "data", **settings_overrides}
        )
        with serve_app(create_app(settings, dispatcher, bus)) as url:
            settings = settings.model_copy(update={"coordinator_url": url})
            yield Engine(settings=settings, model=model, dispatcher=dispatcher, bus=bus, tmp=tmp)


@contextmanager
def cli_env(eng: Engine) -> Iterator[None]:
    """The real CLI's settings (RAAS_COORDINATOR_URL, RAAS_API_TOKEN) pointed at ``eng``'s API,
    as a user's environment would: ``raas`` commands invoked meanwhile talk to it over HTTP."""
    names = ("RAAS_COORDINATOR_URL", "RAAS_API_TOKEN")
    before = {name: os.environ.get(name) for name in names}
    os.environ["RAAS_COORDINATOR_URL"] = eng.settings.coordinator_url
    os.environ["RAAS_API_TOKEN"] = eng.settings.api_token.get_secret_value()
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()
