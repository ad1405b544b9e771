"""A worker killed with SIGKILL in the middle of an iteration: the iteration is re-run as a new
attempt once its heartbeat goes stale, the orphan container is reaped, and the project completes
with nothing lost or counted twice.

Two victims: the whole worker (every process, as when its host dies; the other worker takes
over) and only the prefork pool process running the task (as the OOM killer does; Celery
requeues the message, which must not start a second run while the first one's heartbeat is
still fresh). And a threads worker killed while it runs several projects' iterations at once:
all of them come back, each re-run once by a second worker.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.db import session_scope
from shared.models import Iteration
from tests.support.faults import Rig, containers_of, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


def pool_child(pid: int) -> int:
    """The prefork pool process of a worker started with --pool prefork --concurrency 1."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("victim", ["worker", "pool-process"])
def test_worker_killed_mid_iteration_loses_nothing_and_the_project_completes(
    make_rig: Callable[..., Rig], database_url: str, victim: str
) -> None:
    # Given two prefork workers and a project of five iterations, followed live
    rig = make_rig(ralph_script(5), database_url=database_url, workers=2, pool="prefork")
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When the worker running iteration 2 (or its pool process) is killed while bash runs in its sandbox
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    name = rig.worker_process(running)
    if victim == "worker":
        rig.kill(name, signal.SIGKILL)
    else:
        os.kill(pool_child(rig.stack.procs[name].pid), signal.SIGKILL)
    assert containers_of(project_id), "the killed attempt's sandbox outlives it until the sweep"

    # Then the project completes and every check holds; the dead attempt's reply may be the one
    # cut off in flight, nothing else is missing
    verdict = verify(rig, project_id, follower, submitted_at, cut_replies=1)
    with session_scope(rig.database_url) as session:
        rerun = session.get_one(Iteration, running.id)
    # And iteration 2 was re-run as attempt 2
    assert rerun.attempt == 2, rerun
    what = (
        f"every process of worker {running.worker}"
        if victim == "worker"
        else f"the pool process of worker {running.worker} running the task"
    )
    print(
        "\n"
        + verdict.summary(
            f"SIGKILL to {what} while iteration 2 (attempt 1) ran `sleep` in its sandbox; it was re-run as "
            f"attempt 2 by {rerun.worker} after its heartbeat went stale, and the orphan container was swept."
        )
    )


@pytest.mark.timeout(300)
def test_a_threads_worker_killed_running_several_iterations_hands_them_all_back_to_a_second_worker(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given one threads worker running three projects' first iterations at once, each followed
    # live; its bash command sleeps longer than the test may last, so all three are in it together
    # however slowly the machine starts them (the kill cuts it; the re-runs take the next steps)
    rig = make_rig(
        ralph_script(3, sleep_s=600, window=1),
        database_url=database_url,
        workers=1,
        concurrency=4,
        pool="threads",
    )
    submitted_at = time.monotonic()
    projects = [rig.submit() for _ in range(3)]
    followers = [rig.follow(project_id) for project_id in projects]
    running = [rig.wait_for_tool(project_id, number=1, tool="bash") for project_id in projects]
    assert {it.worker for it in running} == {running[0].worker}, "one worker runs all three"
    worker = rig.stack.procs["worker0"].pid
    assert not Path(f"/proc/{worker}/task/{worker}/children").read_text().split(), (
        "a threads worker forks none"
    )

    # When the worker process is killed (SIGKILL) while all three run bash, and a second one starts
    rig.kill("worker0", signal.SIGKILL)
    assert all(containers_of(project_id) for project_id in projects), (
        "the sandboxes outlive it until the sweep"
    )
    rig.stack.spawn_worker(1, concurrency=4, pool="threads")

    # Then every project completes and every check holds for each: nothing lost, nothing run
    # or charged twice, only the reply cut off in flight missing
    verdicts = [
        verify(rig, project_id, follower, submitted_at, cut_replies=1)
        for project_id, follower in zip(projects, followers, strict=True)
    ]
    # And each killed iteration was re-run once, as attempt 2, by the second worker
    with session_scope(rig.database_url) as session:
        reruns = [session.get_one(Iteration, it.id) for it in running]
    assert [(it.attempt, (it.worker or "").split("@")[0]) for it in reruns] == [(2, "w1")] * 3, reruns
    print(
        "\n"
        + "\n".join(
            verdict.summary(
                f"SIGKILL to threads worker {running[0].worker} while it ran iteration 1 of three projects "
                "at once (each in `sleep` in its sandbox); w1, started after, re-ran each as attempt 2."
            )
            for verdict in verdicts
        )
    )
