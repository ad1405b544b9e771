"""PostgreSQL crashed and restarted in the middle of an iteration: every connection of the
coordinator, the workers and the follower's stream drops; they reconnect, and the project
completes with no message, cost or event lost or doubled.

Two moments: while a tool runs in the sandbox, and while a model reply is on its way (it arrives
when the database is down, and must still be stored and charged once).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.faults import PrivatePostgres, Rig, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
DOWN_S = 4.0
REPLY_LATENCY_S = 1.5
# Iteration 2's second model call: the script's fourth request (two calls per iteration).
SLOW_CALL = 4


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "moment",
    [
        "tool",
        "reply",
    ],
)
def test_postgres_restart_mid_iteration_loses_nothing_and_the_project_completes(
    private_postgres: PrivatePostgres, make_rig: Callable[..., Rig], moment: str
) -> None:
    # Given two workers on a PostgreSQL cluster of this test's own, and a project, followed
    script = ralph_script(5)
    script["responses"][SLOW_CALL - 1]["latency_s"] = REPLY_LATENCY_S
    rig = make_rig(script, database_url=private_postgres.url, workers=2)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When the database crashes (immediate shutdown) while iteration 2 runs bash, or while its
    # second model call is answered, and comes back on the same port and data directory
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    if moment == "reply":
        rig.wait_for_model_call(project_id, SLOW_CALL)
    private_postgres.stop("immediate")
    time.sleep(DOWN_S)
    private_postgres.start()

    # Then the project completes and every check holds
    verdict = verify(rig, project_id, follower, submitted_at)
    when = (
        "iteration 2 ran `sleep` in its sandbox"
        if moment == "tool"
        else f"iteration 2's second model call was being answered (the reply came {REPLY_LATENCY_S}s later)"
    )
    print(
        "\n"
        + verdict.summary(
            f"PostgreSQL stopped with `pg_ctl stop -m immediate` (SIGQUIT: every connection dropped, no "
            f"checkpoint) while {when} ({running.id}, {running.worker}); started again {DOWN_S:.0f}s later "
            "on the same port and data directory (crash recovery)."
        )
    )
