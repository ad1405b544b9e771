"""A coordinator stops in its usual time with a dashboard page open (issue #28 point 5): SIGTERM
ends the page's open streams (a project's events and the projects list's changes) instead of
uvicorn waiting for them, so `raas coordinator` exits 0 on its own — no SIGKILL, and not the
exit 1 it gives when its API is still held open after API_STOP_S.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.engine import pack
from tests.support.stack import ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    script = ROOT_DIR / "examples/scripts/hello.json"
    running = Stack(log_dir=tmp_path / "logs", script=script).start(workers=0)
    yield running
    running.stop()


class OpenStream:
    """An SSE stream read in a thread, as a browser's EventSource holds it: ``opened`` once its
    first message came, ``ended`` once the server finished the response (cleanly or not)."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        self.opened, self.ended = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._client, self._path = client, path
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self._path, timeout=httpx.Timeout(10, read=None)) as answer:
                assert answer.status_code == 200, answer.status_code
                for line in answer.iter_lines():
                    if line.startswith("retry:"):
                        self.opened.set()
        except BaseException as exc:  # read by the test
            self.error = exc
        finally:
            self.ended.set()


def test_sigterm_with_an_open_dashboard_page_ends_its_streams_and_the_coordinator_exits_cleanly(
    stack: Stack,
) -> None:
    url = f"http://127.0.0.1:{stack.coordinator_port}"
    token = os.environ["RAAS_API_TOKEN"]
    with httpx.Client(base_url=url, timeout=20) as client:
        # Given a project, and a signed-in page open on it and on the projects list
        made = client.post(
            "/v1/projects",
            params={"name": "stop-with-a-page-open"},
            content=pack({"PROMPT.md": "Do the task.", "raas.toml": ""}),
            headers={"authorization": f"Bearer {token}", "content-type": "application/gzip"},
        )
        assert made.status_code == 201, made.text
        assert client.post("/login", data={"token": token, "next": "/"}).status_code == 303
        streams = [
            OpenStream(client, f"/ui/projects/{made.json()['id']}/events"),
            OpenStream(client, "/ui/projects-stream"),
        ]
        for stream in streams:
            assert stream.opened.wait(30), stack.logs()
        coordinator = stack.procs["coordinator"]

        # When the coordinator is asked to stop
        os.killpg(coordinator.pid, signal.SIGTERM)
        try:
            coordinator.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(coordinator.pid, signal.SIGKILL)
            coordinator.wait()
            pytest.fail("the coordinator did not stop on SIGTERM and was killed\n" + stack.logs())

        # Then it exited 0 by itself (its API stopped: no "did not stop within" exit 1) and the
        # page's streams were ended by the server
        assert coordinator.returncode == 0, stack.logs()
        assert "did not stop within" not in stack.logs()
        for stream in streams:
            assert stream.ended.wait(10)
