"""Redis (broker and event bus) killed and restarted empty in the middle of an iteration: the
queued messages, the unacked running task and the live subscribers are gone; the reconcile loop
resends what was lost, the follower fills its gap from Postgres, and the project completes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.support.faults import PrivateRedis, Rig, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
DOWN_S = 3.0


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
