"""Fixtures of the integration tests: Docker sandboxes made and removed per test.

Every container a test creates carries a label unique to this test run and is removed at
teardown, whatever the test did; images made by tests are removed too.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import APIError, NotFound

from tests.support.sandboxes import RUN_ID, RUN_LABEL, SandboxFactory
from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import DockerSandbox


@pytest.fixture(scope="session")
def docker_client(docker_engine: str) -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    _remove_containers(client_filters={"label": f"{RUN_LABEL}={RUN_ID}"})
    client.close()


def _remove_containers(client_filters: dict[str, str]) -> None:
    """Remove every container matching the filters; ones already going away are fine."""
    client = docker.from_env()
    for container in client.containers.list(all=True, filters=client_filters):
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
    client.close()


@pytest.fixture(scope="session")
def no_python_image(docker_client: docker.DockerClient, docker_engine: str) -> Iterator[str]:
    """The sandbox image with python3 deleted, to exercise the one-exec-per-call fallback."""
    tag = f"constellation-sandbox-test:nopython-{RUN_ID}"
    name = f"raas-test-mknopython-{RUN_ID}"
    subprocess.run(
        ["docker", "run", "--user", "root", "--name", name, "--label", f"{RUN_LABEL}={RUN_ID}",
         docker_engine, "sh", "-c", "rm -f /usr/bin/python3*"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["docker", "commit", "--change", "USER agent", "--change", "WORKDIR /workspace", name, tag],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)
    yield tag
    _remove_containers(client_filters={"ancestor": tag})
    subprocess.run(["docker", "rmi", "-f", tag], check=True, capture_output=True)


@pytest.fixture
def make_sandbox(
    docker_client: docker.DockerClient, docker_engine: str, tmp_path: Path
) -> Iterator[SandboxFactory]:
    """``make_sandbox(**limits, image=..., workspace=..., labels=...)`` -> a started sandbox."""
    made: list[DockerSandbox] = []

    def make(
        image: str | None = None,
        workspace: Path | None = None,
        labels: dict[str, str] | None = None,
        **limits: object,
    ) -> DockerSandbox:
        ws = workspace or tmp_path / f"ws{len(made)}"
        ws.mkdir(parents=True, exist_ok=True)
        sandbox = DockerSandbox.start(
            image=image or docker_engine,
            host_workspace=ws,
            limits=SandboxLimits.model_validate(limits),
            labels={RUN_LABEL: RUN_ID, **(labels or {})},
            name=f"raas-test-{RUN_ID}-{secrets.token_hex(4)}",
            client=docker_client,
        )
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


@pytest.fixture
def sandbox(make_sandbox: SandboxFactory) -> DockerSandbox:
    return make_sandbox()
