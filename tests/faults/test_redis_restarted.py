"""Redis (broker and event bus) killed and restarted empty in the middle of an iteration: the
queued messages, the unacked running task and the live subscribers are gone; the reconcile loop
resends what was lost, the follower fills its gap from Postgres, and the project completes.

With one worker (issue #10) nothing else can take the work: the worker must survive the broker's
restart, or at least exit with a failure status that a supervisor (systemd, Kubernetes, compose)
restarts it on. The test is that supervisor; a worker that exits 0 stalls the project and fails it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Event, Project, ProjectStatus
from tests.support.faults import PrivateRedis, Rig, ralph_script, verify, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
DOWN_S = 3.0
NO_WORKERS_AFTER_S = 5.0


@pytest.mark.timeout(240)
def test_redis_restart_mid_iteration_loses_nothing_and_the_project_completes(
    make_rig: Callable[..., Rig], private_redis: PrivateRedis, database_url: str
) -> None:
    # Given two workers on a Redis without persistence, and a project of five iterations, followed
    rig = make_rig(ralph_script(5), database_url=database_url, workers=2)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When Redis is killed while iteration 2 runs bash, and started again empty after a while
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    private_redis.kill(signal.SIGKILL)
    time.sleep(DOWN_S)
    private_redis.start()

    # Then the project completes and every check holds (the running task may be cancelled by
    # Celery on the connection loss, cutting off at most the reply it was waiting for)
    verdict = verify(rig, project_id, follower, submitted_at, cut_replies=1)
    print(
        "\n"
        + verdict.summary(
            f"SIGKILL to the Redis server (broker and pub/sub, no persistence) while iteration 2 "
            f"({running.id}, {running.worker}) ran `sleep` in its sandbox; restarted empty on the same "
            f"port {DOWN_S:.0f}s later, so every queued and unacked message and every subscription was gone."
        )
    )


class Supervisor:
    """Restarts the rig's ``worker0`` when it exits with a failure status, as ``Restart=on-failure``
    would; an exit with status 0 is a clean stop, which no supervisor undoes: it is recorded."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.restarts: list[int] = []  # the failure statuses it restarted the worker after
        self.clean_exit = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            code = self.rig.stack.procs["worker0"].poll()
            if code is None:
                continue
            if code == 0:
                self.clean_exit.set()
                return
            self.restarts.append(code)
            self.rig.stack.spawn_worker(0, concurrency=None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _settled(rig: Rig, project_id: str) -> bool:
    with session_scope(rig.database_url) as session:
        status = session.scalar(select(Project.status).where(Project.id == project_id))
    return status in (
        ProjectStatus.COMPLETED,
        ProjectStatus.FAILED,
        ProjectStatus.PAUSED,
        ProjectStatus.STOPPED,
    )


def _watch_events(rig: Rig, project_id: str) -> list[str]:
    """The project's ``no_workers`` and ``workers_back`` events, in order."""
    with session_scope(rig.database_url) as session:
        return list(
            session.scalars(
                select(Event.type)
                .where(Event.project_id == project_id, Event.type.in_(["no_workers", "workers_back"]))
                .order_by(Event.seq)
            )
        )


@pytest.mark.timeout(300)
def test_redis_restart_with_one_worker_at_default_concurrency_loses_nothing_and_completes(
    make_rig: Callable[..., Rig], private_redis: PrivateRedis, database_url: str
) -> None:
    # Given ONE worker at `raas worker`'s default concurrency (2), supervised, on a Redis without
    # persistence, and a project of five iterations, followed
    rig = make_rig(
        ralph_script(5),
        database_url=database_url,
        workers=1,
        concurrency=None,
        env={"RAAS_NO_WORKERS_AFTER_S": str(NO_WORKERS_AFTER_S)},
    )
    supervisor = Supervisor(rig)
    try:
        submitted_at = time.monotonic()
        project_id = rig.submit()
        follower = rig.follow(project_id)

        # When Redis is killed while iteration 2 runs bash, and started again empty after a while
        running = rig.wait_for_tool(project_id, number=2, tool="bash")
        private_redis.kill(signal.SIGKILL)
        time.sleep(DOWN_S)
        private_redis.start()

        # Then the worker does not stop cleanly (that would leave nothing to run the project) ...
        wait_until(
            lambda: supervisor.clean_exit.is_set() or _settled(rig, project_id),
            180,
            "the project to settle",
            1,
        )
        if supervisor.clean_exit.is_set():
            noticed = _wait_quietly(lambda: bool(_watch_events(rig, project_id)), NO_WORKERS_AFTER_S + 30)
            pytest.fail(
                "the only worker exited with status 0 after the Redis restart, so no supervisor "
                "restarts it and the project stalls (issue #10); the coordinator "
                + ("reported no_workers" if noticed else "did not report no_workers")
                + rig.explain()
            )
    finally:
        supervisor.stop()

    # ... and the project completes with every check holding
    verdict = verify(rig, project_id, follower, submitted_at, cut_replies=1)
    # and if the coordinator said no worker was there while the worker reconnected, it said so
    # once per absence and took it back each time (a follower does not go on saying "waiting")
    told = _watch_events(rig, project_id)
    assert told == ["no_workers", "workers_back"] * (len(told) // 2), told
    print(
        "\n"
        + verdict.summary(
            f"one worker at the default concurrency; SIGKILL to the Redis server (broker and pub/sub, no "
            f"persistence) while iteration 2 ({running.id}) ran `sleep` in its sandbox; restarted empty "
            f"{DOWN_S:.0f}s later. The worker was restarted {len(supervisor.restarts)} time(s) after "
            f"failure statuses {supervisor.restarts}; the coordinator's worker watch said: "
            f"{told or 'nothing'}."
        )
    )


def _wait_quietly(predicate: Callable[[], bool], timeout_s: float) -> bool:
    try:
        return bool(wait_until(predicate, timeout_s, "it", 1))
    except TimeoutError:
        return False


@pytest.mark.timeout(240)
def test_a_project_submitted_while_redis_is_down_is_accepted_and_completes_once_it_is_back(
    make_rig: Callable[..., Rig], private_redis: PrivateRedis, database_url: str
) -> None:
    # Given two workers on a Redis without persistence, which is then killed
    rig = make_rig(ralph_script(3), database_url=database_url, workers=2)
    private_redis.kill(signal.SIGKILL)

    # When a project is submitted (created, then started) while the broker is away: its first
    # iteration is committed queued, and its message cannot be sent
    submitted_at = time.monotonic()
    project_id = rig.submit()  # (asserts that `raas submit` succeeded: no 500 for a lost send)

    # And Redis comes back empty a while later
    time.sleep(DOWN_S)
    private_redis.start()
    follower = rig.follow(project_id)

    # Then the reconcile loop sends the iteration again, the project completes, and every check holds
    verdict = verify(rig, project_id, follower, submitted_at)
    print(
        "\n"
        + verdict.summary(
            f"Redis (broker and pub/sub) killed before `raas submit`; the submission answered success "
            f"with its first iteration's message unsent; Redis restarted empty {DOWN_S:.0f}s later."
        )
    )
