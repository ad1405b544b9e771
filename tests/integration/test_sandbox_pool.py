"""The warm pool: sandboxes started ahead of time, handed out without starting one (how fast is a
figure of tests/benchmarks/bench_sandbox.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.support import sandboxes as fx
from workers.sandbox.base import SandboxLimits
from workers.sandbox.pool import POOL_LABEL, SandboxPool

pytestmark = [pytest.mark.docker, pytest.mark.integration]


@pytest.fixture
def pool(docker_client: docker.DockerClient, docker_engine: str, tmp_path: Path) -> Iterator[SandboxPool]:
    pool = SandboxPool(
        size=2,
        image=docker_engine,
        limits=SandboxLimits(),
        labels={fx.RUN_LABEL: fx.RUN_ID, "raas.worker": "w-test"},
        client=docker_client,
        name_prefix=f"raas-test-pool-{fx.RUN_ID}",
        scratch_dir=tmp_path / "pool",
    )
    assert pool.wait_until_full(timeout_s=30)
    yield pool
    pool.close()


def _pool_containers(client: docker.DockerClient, pool: SandboxPool) -> list[str]:
    return [
        c.name
        for c in client.containers.list(all=True, filters={"label": f"{POOL_LABEL}={pool.name_prefix}"})
    ]


def test_a_warm_sandbox_is_handed_out_with_the_callers_files(
    pool: SandboxPool, docker_client: docker.DockerClient
) -> None:
    def populate(workspace: Path) -> None:
        (workspace / "PROMPT.md").write_text("build it\n")

    warm = _pool_containers(docker_client, pool)
    sandbox = pool.acquire(populate)
    try:
        assert sandbox.name in warm  # one started before it was asked for, not one started for it
        assert sandbox.run("cat PROMPT.md && echo more >> PROMPT.md").exit_code == 0
        assert (sandbox.host_workspace / "PROMPT.md").read_text() == "build it\nmore\n"
        assert sandbox.run("id -u").output == "1000\n"
    finally:
        sandbox.close()


def test_the_pool_refills_after_a_sandbox_is_taken(
    pool: SandboxPool, docker_client: docker.DockerClient
) -> None:
    taken = pool.acquire()
    try:
        assert pool.wait_until_full(timeout_s=30)
        assert len(_pool_containers(docker_client, pool)) == 3
    finally:
        taken.close()


def test_a_pooled_sandbox_that_died_while_idle_is_not_handed_out(
    pool: SandboxPool, docker_client: docker.DockerClient
) -> None:
    for name in _pool_containers(docker_client, pool):
        docker_client.api.kill(name)
    sandbox = pool.acquire(timeout_s=5)
    try:
        assert sandbox.run("echo fresh").output == "fresh\n"
    finally:
        sandbox.close()


def test_closing_the_pool_removes_every_sandbox_not_handed_out(
    pool: SandboxPool, docker_client: docker.DockerClient
) -> None:
    kept = pool.acquire()
    pool.close()
    assert _pool_containers(docker_client, pool) == [kept.name]
    assert kept.run("echo still here").output == "still here\n"
    kept.close()
