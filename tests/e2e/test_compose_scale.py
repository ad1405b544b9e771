"""`docker compose up --scale worker=2` starts two workers that the coordinator sees, from the
app image built with no registry (deploy/build-app-offline.sh), and the workers answer the
Kubernetes manifests' probe and stop hook.

No registry answers here, so the postgres and redis services of compose.yaml cannot run: an
override file runs the coordinator and the workers with `network_mode: host` against this test
session's own Postgres database and Redis server on loopback, and `up --no-deps` starts only
them. (Building Postgres and Redis images too would test Debian's packages, not our file, and
their traffic would cross the Docker bridge.) The rest is compose.yaml as shipped: its commands,
environment, volumes and the Docker socket. What host networking changes is the node name: the
replicas share the host's hostname, so each worker takes a random one.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.compose import COMPOSE_FILE, ROOT_DIR, clean_env, compose_command
from tests.support.loopback import free_port
from tests.support.manifests import one
from tests.support.stack import wait_http

# About two minutes; up to five more when pyproject.toml changed and the wheels are made anew.
pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

APP_IMAGE = "constellation-app:offline"
NODE_FILE = "/tmp/raas-node"  # inside the worker container
_WORKER = (
    "echo iterations@compose-$$(od -An -N4 -tx4 /dev/urandom | tr -d ' ') >{node_file}"
    " && exec raas worker --concurrency 1 --name $$(cat {node_file})"
)
_PING = "celery --app shared.celery_app:app inspect ping --timeout 10 --destination $$(cat {node_file})"
_HEALTHZ = "import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/healthz')"
OVERRIDE = f"""\
services:
  coordinator:
    image: {{image}}
    network_mode: host
    command: ["raas", "coordinator", "--host", "127.0.0.1", "--port", "{{port}}"]
    healthcheck:
      test: ["CMD", "python", "-c", "{_HEALTHZ}"]
  worker:
    image: {{image}}
    network_mode: host
    command: ["sh", "-c", "{_WORKER}"]
    healthcheck:
      test: ["CMD-SHELL", "{_PING}"]
"""


@pytest.fixture(scope="module")
def app_image() -> str:
    """The app image, built from the working tree with no registry (cached layers make it quick)."""
    done = subprocess.run(
        [str(ROOT_DIR / "deploy" / "build-app-offline.sh"), APP_IMAGE],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return APP_IMAGE


class Compose:
    """One compose project, torn down (containers and volumes) by ``down``.

    compose.yaml and the override are merged by compose itself (``config``); the one thing the
    test then takes out is the coordinator's published port, which Docker refuses beside host
    networking (and an override cannot remove in compose 1.29).
    """

    def __init__(self, override: Path, env: dict[str, str]) -> None:
        self.env = env
        merged = [*compose_command(), "--file", str(COMPOSE_FILE), "--file", str(override)]
        done = subprocess.run([*merged, "config"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        config = yaml.safe_load(done.stdout)
        config["services"]["coordinator"].pop("ports", None)  # none since the proxy publishes 8700
        rendered = override.with_name("compose.rendered.yaml")
        rendered.write_text(yaml.safe_dump(config))
        project = f"raas-compose-test-{secrets.token_hex(4)}"
        self.base = [*compose_command(), "--project-name", project, "--file", str(rendered)]

    def run(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"compose {' '.join(args)}: {done.stderr[-3000:]}"
        return done

    def logs(self) -> str:
        done = subprocess.run(
            [*self.base, "logs", "--no-color", "--tail", "40"], env=self.env, capture_output=True, text=True
        )
        return done.stdout[-6000:]


@pytest.fixture
def compose(app_image: str, services: dict[str, str], tmp_path: Path) -> Iterator[tuple[Compose, str]]:
    port = free_port()
    override = tmp_path / "compose.loopback.yaml"
    override.write_text(OVERRIDE.format(image=app_image, port=port, node_file=NODE_FILE))
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        RAAS_DATABASE_URL=services["database_url"],
        RAAS_BROKER_URL=services["redis_url"],
        RAAS_REDIS_URL=services["redis_url"],
        RAAS_COORDINATOR_URL=url,
        RAAS_SANDBOX_IMAGE=services["sandbox_image"],
        RAAS_API_TOKEN="compose-" + secrets.token_hex(16),
        FLOWER_PASSWORD="unused",
    )
    stack = Compose(override, env)
    try:
        yield stack, url
    finally:
        subprocess.run(
            [*stack.base, "down", "--volumes", "--timeout", "20"], env=env, capture_output=True, timeout=180
        )


def _workers(env: dict[str, str]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "workers", "--json", "--timeout", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [n for n in json.loads(done.stdout) if n["name"].startswith("iterations@compose-")]


def _wait_for_workers(env: dict[str, str], count: int, timeout_s: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = [n for n in _workers(env) if "iterations" in n["queues"]]
        if len(nodes) >= count or time.monotonic() > deadline:
            return nodes
        time.sleep(1)


def _docker_exec(container: str, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    flags = [f"--env={key}={value}" for key, value in env.items()]
    return subprocess.run(
        ["docker", "exec", *flags, container, *command], capture_output=True, text=True, timeout=60
    )


def test_scaling_the_worker_service_to_two_starts_two_workers_the_coordinator_sees(
    compose: tuple[Compose, str],
) -> None:
    stack, url = compose

    # When the coordinator and two worker replicas start from the offline-built image
    stack.run("up", "--detach", "--no-deps", "--no-build", "--scale", "worker=2", "coordinator", "worker")
    wait_http(f"{url}/healthz", timeout_s=90)

    # Then two workers consume the iterations queue, as `raas workers` reports through the coordinator
    nodes = _wait_for_workers(stack.env, 2)
    assert len(nodes) == 2, stack.logs()
    # ... and they are the two containers compose started
    containers = stack.run("ps", "--quiet", "worker").stdout.split()
    assert len(containers) == 2
    names = {_docker_exec(c, ["cat", NODE_FILE], {}).stdout.strip(): c for c in containers}
    assert set(names) == {n["name"] for n in nodes}

    # When a worker is asked what Kubernetes asks it (deploy/kubernetes/worker.yaml), with its
    # pod name as HOSTNAME
    pod = one("Deployment", "raas-worker")["spec"]["template"]["spec"]
    worker = next(c for c in pod["containers"] if c["name"] == "worker")
    stopping, staying = sorted(names)
    hostname = {"HOSTNAME": stopping.split("@", 1)[1]}
    probe = _docker_exec(names[stopping], worker["livenessProbe"]["exec"]["command"], hostname)
    # Then its liveness probe passes
    assert probe.returncode == 0, probe.stdout + probe.stderr
    # And its stop hook makes it stop taking iterations, while the other one goes on
    hook = _docker_exec(names[stopping], worker["lifecycle"]["preStop"]["exec"]["command"], hostname)
    assert hook.returncode == 0, hook.stdout + hook.stderr
    assert "no longer consuming from" in hook.stdout, hook.stdout
    consuming = {n["name"] for n in _workers(stack.env) if "iterations" in n["queues"]}
    assert consuming == {staying}
