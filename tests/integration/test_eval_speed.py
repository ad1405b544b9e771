"""What makes an eval attempt's test start at once (issue #27), without giving up its rules:

- the hidden test's container is started ahead of need, but it is fresh: nothing but ``sleep``
  ever ran in it, it serves one script and is removed, the tests are read-only in it and the
  workspace written after its start is the one the script sees;
- the eval driver sends an ended attempt's test when the project's end event arrives, not at its
  next tick (a tick of an hour here: only the event can make the test go).
"""

from __future__ import annotations

import io
import secrets
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from sqlalchemy import select, update

from orchestrator.evals import store
from orchestrator.evals.driver import EvalDriver
from orchestrator.scheduling import lifecycle
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import utcnow
from shared.models.evals import AttemptState, EvalAttempt, EvalRun, EvalRunStatus
from shared.settings import Settings, get_settings
from tests.support.engine import RecordingDispatcher
from workers.evaluation import TESTS_DIR, FreshBox, FreshBoxes, run_in_box

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "evals" / "four"


@pytest.fixture
def settings(services: dict[str, str], tmp_path: Path) -> Settings:
    return get_settings().model_copy(update={"data_dir": tmp_path / "data"})


def _settled_processes(box: FreshBox) -> list[str]:
    """The container's processes once runc has handed it to its command.

    `docker start` returns while `runc init` may still be the only process (seen in a whole
    run): a box just taken can be that young, and its command is not running yet.
    """
    assert box.container is not None
    deadline = time.monotonic() + 10
    while True:
        processes = sorted(" ".join(p[-1:]) for p in box.container.top()["Processes"])
        if processes != ["runc init"] or time.monotonic() > deadline:
            return processes
        time.sleep(0.05)


@pytest.mark.integration
@pytest.mark.docker
def test_a_warm_test_container_is_fresh_serves_one_script_and_is_removed(
    settings: Settings, tmp_path: Path
) -> None:
    boxes = FreshBoxes(tmp_path)
    client = docker.from_env()
    seen: list[str] = []
    try:
        # Given: a first box (started now) and, in the background, its replacement.
        def fill(box: FreshBox) -> None:
            seen.append(box.container.id if box.container else "")
            # Nothing but the container's init and `sleep` ever ran in it.
            assert _settled_processes(box) == sorted(
                ["/sbin/docker-init -- sleep infinity", "sleep infinity"]
            )
            (box.workspace / "answer.txt").write_text("OK\n")
            (box.tests / "test.sh").write_text(
                "grep -qx OK answer.txt && ! touch $RAAS_TESTS_DIR/x 2>/dev/null && echo the test ran\n"
            )

        # When: two tests run one after the other.
        first = run_in_box(boxes, settings.sandbox_image, fill, f"{TESTS_DIR}/test.sh", 60)
        second = run_in_box(boxes, settings.sandbox_image, fill, f"{TESTS_DIR}/test.sh", 60)
        # Then: each passed in its own container (the workspace written after the start was
        # the one it saw, the tests could not be written) ...
        assert (first.exit_code, first.output) == (0, "the test ran\n")
        assert (second.exit_code, second.output) == (0, "the test ran\n")
        assert len(set(seen)) == 2
    finally:
        boxes.close()
    # ... and once closed, no box of theirs is left, warm or used.
    try:
        # The list call's summaries: containers.list() inspects each container in turn, and one
        # another test removed in between raised NotFound (seen in a whole run).
        left = {c["Id"] for c in client.api.containers(all=True)}
        assert not left & set(seen)
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("raas-eval-box-")]
    finally:
        client.close()


def _upload(tmp: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(SUITE, arcname=store.SUITE_DIR)
        request = store.RunRequest(
            configs=[store.ConfigIn(name="one", toml="max_iterations = 1\n")], k=1, concurrency=1
        )
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(store.REQUEST_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = tmp / f"upload-{secrets.token_hex(4)}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


class _Verifier:
    def __init__(self) -> None:
        self.sent: list[str] = []
        self.arrived = threading.Event()

    def verify(self, attempt_id: str) -> None:
        self.sent.append(attempt_id)
        self.arrived.set()


@pytest.fixture
def _no_run_left_running() -> Iterator[None]:
    started = utcnow()
    yield
    with session_scope() as session:
        session.execute(
            update(EvalRun)
            .where(EvalRun.created_at >= started, EvalRun.status == EvalRunStatus.RUNNING)
            .values(status=EvalRunStatus.PAUSED)
        )


def _running(run_id: str) -> tuple[str, str | None]:
    """The run's attempt the driver's first pass started (waited for: the pass is in its thread)."""
    for _ in range(300):
        with session_scope() as session:
            row = session.execute(
                select(EvalAttempt.id, EvalAttempt.project_id).where(
                    EvalAttempt.run_id == run_id, EvalAttempt.state == AttemptState.RUNNING
                )
            ).one_or_none()
        if row is not None:
            return row[0], row[1]
        time.sleep(0.1)
    msg = "the driver's first pass started no attempt"
    raise AssertionError(msg)


@pytest.mark.integration
@pytest.mark.usefixtures("_no_run_left_running")
def test_the_driver_sends_a_test_when_the_project_ends_not_at_its_next_tick(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: a driver whose tick is an hour, on the Redis bus, with one attempt running.
    run = store.create_run(_upload(tmp_path), None, settings)
    bus, verifier, stop = RedisBus(settings.redis_url), _Verifier(), threading.Event()
    driver = EvalDriver(settings, RecordingDispatcher(), bus, verifier, tick_s=3600)
    loop = threading.Thread(target=driver.loop, args=(stop,), daemon=True)
    loop.start()
    try:
        assert driver.watching.wait(30)
        attempt_id, project_id = _running(run.id)  # the loop's first pass started it
        assert project_id is not None
        assert not verifier.sent
        # When: its project ends (stopped: its end event is published).
        lifecycle.stop_project(project_id, RecordingDispatcher(), bus)
        # Then: the driver's next pass comes with the event, and sends the test.
        assert verifier.arrived.wait(60), "no test sent: the driver waited for its tick"
        assert attempt_id in verifier.sent
    finally:
        stop.set()
        loop.join(timeout=30)
