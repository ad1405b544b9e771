"""The coordinator killed and restarted in the middle of a project: its API, scheduler and
reconcile loop are gone for a while and the follower's stream drops; the restarted coordinator
picks the project up again and it completes with nothing lost or doubled.

Two timings: restarted while an iteration runs (it is back before the iteration ends), and down
while an iteration ends (its workspace push and its report find nobody).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from shared.db import session_scope
from shared.models import Iteration, IterationStatus
from tests.support.faults import Rig, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
LONG_SLEEP_S = 10.0
DOWN_S = 5.0


@pytest.mark.timeout(240)
def test_coordinator_restart_mid_iteration_loses_nothing_and_the_project_completes(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given two workers and a project whose iterations run bash for 10 s, followed live
    rig = make_rig(ralph_script(5, sleep_s=LONG_SLEEP_S), database_url=database_url, workers=2)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When the coordinator is killed while iteration 2 runs bash, and started again at once
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    killed_at = time.monotonic()
    rig.kill("coordinator", signal.SIGKILL)
    rig.start_coordinator()
    down_s = time.monotonic() - killed_at
    with session_scope(rig.database_url) as session:
        still = session.get_one(Iteration, running.id).status
    assert still == IterationStatus.RUNNING, "the restart should be over before the iteration ends"

    # Then the project completes and every check holds
    verdict = verify(rig, project_id, follower, submitted_at)
    print(
        "\n"
        + verdict.summary(
            f"SIGKILL to the coordinator (API, scheduler, reconcile loop, follower streams) while "
            f"iteration 2 ({running.id}, {running.worker}) ran `sleep` in its sandbox; started again on "
            f"the same port, answering {down_s:.1f}s after the kill, before the iteration ended."
        )
    )


@pytest.mark.timeout(240)
def test_iteration_ending_while_the_coordinator_is_down_loses_nothing_and_the_project_completes(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given two workers and a project of five iterations, followed live
    rig = make_rig(ralph_script(5), database_url=database_url, workers=2)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When the coordinator is killed while iteration 2 runs bash (2 s), and kept down for 5 s,
    # so that the iteration pushes its workspace and reports while nobody answers
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    rig.kill("coordinator", signal.SIGKILL)
    time.sleep(DOWN_S)
    rig.start_coordinator()

    # Then the project completes and every check holds
    verdict = verify(rig, project_id, follower, submitted_at)
    print(
        "\n"
        + verdict.summary(
            f"SIGKILL to the coordinator while iteration 2 ({running.id}, {running.worker}) ran `sleep` "
            f"in its sandbox; kept down {DOWN_S:.0f}s, so the iteration ended (pushed its workspace, "
            "reported) while nobody answered; then started again on the same port."
        )
    )
