"""The Docker engine unreachable for a while in the middle of an iteration: the workers' socket to
it is cut (open connections, the sandbox's exec stream among them, aborted; new ones refused) and
restored; the engine itself, shared with other sessions, is never touched. The project completes
with nothing lost or doubled and no container left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.faults import DockerSocketProxy, Rig, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
DOWN_S = 15.0


@pytest.mark.timeout(240)
def test_docker_engine_unreachable_mid_iteration_loses_nothing_and_the_project_completes(
    docker_proxy: DockerSocketProxy, make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given two workers that reach Docker through a proxy (each keeping its tasks' containers
    # between iterations, the default), and a project of five iterations, followed
    env = {"DOCKER_HOST": docker_proxy.docker_host}
    rig = make_rig(ralph_script(5), database_url=database_url, workers=2, env=env)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When the proxy is cut while iteration 2 runs bash in its sandbox, and restored later
    running = rig.wait_for_tool(project_id, number=2, tool="bash")
    assert docker_proxy.connections, "the workers reach Docker through the proxy"
    docker_proxy.cut()
    time.sleep(DOWN_S)
    docker_proxy.restore()

    # Then the project completes and every check holds
    verdict = verify(rig, project_id, follower, submitted_at)
    print(
        "\n"
        + verdict.summary(
            f"the workers' Docker socket (DOCKER_HOST, a proxy to the engine) cut for {DOWN_S:.0f}s — open "
            f"connections aborted, new ones refused — while iteration 2 ({running.id}, {running.worker}) ran "
            f"`sleep` in its sandbox over a docker exec stream; then restored."
        )
    )
