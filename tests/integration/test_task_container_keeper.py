"""The keeper of task containers (workers/sandbox/keeper.py) on a real Docker engine and Redis: a
parked container goes only to its own tenant, project and task, only with its own labels, and a
project's ending, published on the real event bus, removes its parked containers at once.

The whole loop through a worker is tests/e2e/test_task_containers.py.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from shared.events import RedisBus
from shared.models import utcnow
from shared.schemas import EventOut
from tests.support import sandboxes as fx
from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.keeper import TaskContainers, TaskKey

pytestmark = [pytest.mark.docker, pytest.mark.integration]

CLUSTER, WORKER = f"test-{fx.RUN_ID}", "w-keeper@test"
FINGERPRINT = ("image", "limits", "")


@pytest.fixture
def keeper() -> Iterator[TaskContainers]:
    keeper = TaskContainers(idle_s=600, cluster=CLUSTER, worker=WORKER)
    yield keeper
    keeper.close()


@pytest.fixture
def start(
    docker_client: docker.DockerClient, docker_engine: str, keeper: TaskContainers, tmp_path: Path
) -> Callable[[TaskKey], DockerSandbox]:
    """A sandbox started as a worker starts a task's container: labelled with ``key``."""

    def start(key: TaskKey) -> DockerSandbox:
        workspace = tmp_path / secrets.token_hex(4)
        workspace.mkdir()
        labels = {
            **keeper.labels(key),
            fx.RUN_LABEL: fx.RUN_ID,
            "raas.cluster": CLUSTER,
            "raas.worker": WORKER,
            "raas.iteration": "it-1",
            "raas.attempt": "1",
        }
        return DockerSandbox.start(
            image=docker_engine,
            host_workspace=workspace,
            limits=SandboxLimits(memory="64m"),
            labels=labels,
            name=f"raas-test-keeper-{secrets.token_hex(4)}",
        )

    return start


def _exists(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.api.inspect_container(container_id)
    except NotFound:
        return False
    return True


def test_a_parked_container_goes_back_to_its_own_task_with_what_it_left(
    keeper: TaskContainers, start: Callable[[TaskKey], DockerSandbox], docker_client: docker.DockerClient
) -> None:
    # Given a task's container, parked after its iteration wrote to /tmp
    mine = TaskKey("tenant-a", "project-1", "task-1")
    sandbox = start(mine)
    assert sandbox.run("echo left-here > /tmp/marker").exit_code == 0
    assert keeper.park(mine, sandbox, FINGERPRINT)

    # When another task of the project, the same task of another project, and the same task ids
    # under another tenant ask for one
    for other in (
        TaskKey("tenant-a", "project-1", "task-2"),
        TaskKey("tenant-a", "project-2", "task-1"),
        TaskKey("tenant-b", "project-1", "task-1"),
    ):
        # Then none of them gets it
        assert keeper.take(other) is None
    assert keeper.parked() == {mine: sandbox.container_id}

    # And its own task does: the same container, with what the last iteration left
    taken = keeper.take(mine)
    assert taken is not None
    assert taken.sandbox.container_id == sandbox.container_id
    assert taken.fingerprint == FINGERPRINT
    assert taken.sandbox.run("cat /tmp/marker").output == "left-here\n"
    assert keeper.parked() == {}
    taken.sandbox.close()
    assert not _exists(docker_client, sandbox.container_id)


def test_a_container_whose_labels_are_another_tasks_is_removed_not_handed_out(
    keeper: TaskContainers, start: Callable[[TaskKey], DockerSandbox], docker_client: docker.DockerClient
) -> None:
    # Given a container made for one task but parked under another's key (a bug the labels catch)
    made_for = TaskKey("tenant-a", "project-1", "task-1")
    parked_as = TaskKey("tenant-a", "project-1", "task-9")
    sandbox = start(made_for)
    assert keeper.park(parked_as, sandbox, FINGERPRINT)

    # When that key asks for it, then it is refused and removed
    assert keeper.take(parked_as) is None
    assert not _exists(docker_client, sandbox.container_id)
    assert not sandbox.host_workspace.exists()


def test_a_dead_parked_container_is_not_handed_out(
    keeper: TaskContainers, start: Callable[[TaskKey], DockerSandbox], docker_client: docker.DockerClient
) -> None:
    key = TaskKey("tenant-a", "project-1", "task-1")
    sandbox = start(key)
    assert keeper.park(key, sandbox, FINGERPRINT)
    docker_client.api.kill(sandbox.container_id)  # it died while parked (the OOM killer, a restart)
    assert keeper.take(key) is None
    assert not _exists(docker_client, sandbox.container_id)


@pytest.mark.parametrize(
    "ending", ["project_stopped", "project_paused", "project_failed", "project_completed"]
)
def test_a_project_ending_on_the_event_bus_removes_its_parked_containers_at_once(
    keeper: TaskContainers,
    start: Callable[[TaskKey], DockerSandbox],
    docker_client: docker.DockerClient,
    redis_url: str,
    ending: str,
) -> None:
    # Given a keeper listening to the project events (idle window: 10 minutes), holding two task
    # containers of one project and one of another
    keeper.watch(redis_url)
    ended, running = f"p-{secrets.token_hex(4)}", f"p-{secrets.token_hex(4)}"
    keys = [TaskKey("t", ended, "task-1"), TaskKey("t", ended, "task-2"), TaskKey("t", running, "task-1")]
    sandboxes = [start(key) for key in keys]
    for key, sandbox in zip(keys, sandboxes, strict=True):
        assert keeper.park(key, sandbox, FINGERPRINT)
    bus = RedisBus(redis_url)
    deadline = time.monotonic() + 10  # the listener subscribes on its own thread
    while time.monotonic() < deadline and set(keeper.parked()) == set(keys):
        # When the project's ending is published (as the coordinator publishes it after its commit)
        bus.publish(EventOut(seq=1, project_id=ended, type=ending, data={}, ts=utcnow()))
        time.sleep(0.2)

    # Then its containers are gone (removed by the listener, right after it forgot them), the
    # other project's stays
    assert set(keeper.parked()) == {keys[2]}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_exists(docker_client, s.container_id) for s in sandboxes[:2]):
        time.sleep(0.1)
    assert not _exists(docker_client, sandboxes[0].container_id)
    assert not _exists(docker_client, sandboxes[1].container_id)
    assert _exists(docker_client, sandboxes[2].container_id)
    # And a container of that project still in use when the ending came is not parked after it
    late = start(TaskKey("t", ended, "task-3"))
    assert not keeper.park(TaskKey("t", ended, "task-3"), late, FINGERPRINT)
    late.close()


def test_a_container_idle_past_the_window_is_removed(
    start: Callable[[TaskKey], DockerSandbox], docker_client: docker.DockerClient
) -> None:
    keeper = TaskContainers(idle_s=600, cluster=CLUSTER, worker=WORKER)
    try:
        key = TaskKey("t", "p", "task")
        sandbox = start(key)
        assert keeper.park(key, sandbox, FINGERPRINT)
        assert keeper.expire(now=time.monotonic() + 300) == 0
        assert keeper.expire(now=time.monotonic() + 601) == 1
        assert not _exists(docker_client, sandbox.container_id)
        assert keeper.take(key) is None
    finally:
        keeper.close()
