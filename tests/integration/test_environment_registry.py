"""Environment snapshots shared through an operator's registry (RAAS_SNAPSHOT_REGISTRY, issue #26
point 2) on real Docker and a real registry on loopback (Debian's docker-registry, the CNCF
distribution registry): worker A runs the setup and pushes the snapshot; a second host, without
it, pulls it and never runs the setup; with the registry down the setup runs locally, logged."""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import ImageNotFound

from shared.errors import InvalidInput
from shared.project_config.environment import EnvironmentConfig
from shared.settings import get_settings
from tests.support.registry import Registry, registry
from tests.support.sandboxes import RUN_ID, SANDBOX_IMAGE, run_with_environment
from workers.environment import Environments
from workers.environment.snapshot import KEY_LABEL, SNAPSHOT_REPO, snapshot_key

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SETUP = "echo ran >> .venv/setup-runs"
LOGGER = "workers.environment.snapshot"


@pytest.fixture
def running(tmp_path_factory: pytest.TempPathFactory, docker_engine: str) -> Iterator[Registry]:
    with registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture
def docker_client(docker_engine: str) -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


def config(name: str) -> EnvironmentConfig:
    # The run's id and the test's name key the snapshot: never one of another run or test.
    env = {"RAAS_TEST_RUN": f"{RUN_ID}-{name}"}
    return EnvironmentConfig(setup=SETUP, keep=[".venv"], setup_network="none", env=env)


def checkout(root: Path, name: str) -> Path:
    workdir = root / name
    workdir.mkdir()
    (workdir / "README").write_text("a project\n", encoding="utf-8")
    return workdir


def remove(client: docker.DockerClient, *names: str | None) -> None:
    for name in names:
        if name:
            with contextlib.suppress(ImageNotFound):
                client.images.remove(name, force=True)


def test_a_second_host_pulls_the_snapshot_and_never_runs_the_setup(
    running: Registry,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repository = f"{running.address}/raas-env"
    env = config("pulled")
    host_a = Environments(tmp_path / "a", SANDBOX_IMAGE, allow_full_network=False, registry=repository)
    host_b = Environments(tmp_path / "b", SANDBOX_IMAGE, allow_full_network=False, registry=repository)
    first = second = None
    try:
        # Given: worker A found nothing in the registry, ran the setup, and pushed the snapshot
        with caplog.at_level(logging.INFO, logger=LOGGER):
            first = host_a.prepare(env, checkout(tmp_path, "one"))
        assert first.built
        assert first.pulled is None
        assert first.snapshot is not None
        assert "is not in the registry: building it here" in caplog.text
        key = first.snapshot.split(":", 1)[1]
        assert running.tags("raas-env") == [key]
        built_id = docker_client.images.get(first.snapshot).id
        with pytest.raises(ImageNotFound):  # A keeps one name for it: its own
            docker_client.images.get(f"{repository}:{key}")
        # ...and a second host lacks it
        docker_client.images.remove(first.snapshot, force=True)
        # When: worker B, a fresh process on that host, prepares the same environment
        second = host_b.prepare(env, checkout(tmp_path, "two"))
        # Then: it pulled A's snapshot (the very image: same id) and did not run the setup
        assert not second.built
        assert second.pulled == f"{repository}:{key}"
        assert second.snapshot == first.snapshot
        assert docker_client.images.get(second.snapshot).id == built_id
        assert run_with_environment(second, tmp_path / "two", "cat .venv/setup-runs") == (0, "ran\n")
        # the pulled snapshot is this host's own now: the next iteration neither pulls nor builds
        third = host_b.prepare(env, checkout(tmp_path, "three"))
        assert (third.built, third.pulled, third.snapshot) == (False, None, first.snapshot)
    finally:
        host_a.close()
        host_b.close()
        remove(docker_client, first and first.snapshot)


def test_a_registry_that_is_down_is_logged_and_the_setup_runs_here(
    tmp_path: Path, docker_client: docker.DockerClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Given: a registry that was there and is stopped (nothing listens on its port)
    (tmp_path / "registry").mkdir()
    down = Registry(tmp_path / "registry")
    down.wait_ready()
    down.stop()
    host = Environments(tmp_path / "state", SANDBOX_IMAGE, False, registry=f"{down.address}/raas-env")
    prepared = None
    try:
        # When: a worker prepares an environment whose snapshot nobody has
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            prepared = host.prepare(config("down"), checkout(tmp_path, "one"))
        # Then: the setup ran here, the iteration has its snapshot, and both failures are logged
        assert prepared.built
        assert prepared.pulled is None
        assert run_with_environment(prepared, tmp_path / "one", "cat .venv/setup-runs") == (0, "ran\n")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("not pulled (the setup runs here instead)" in w for w in warnings), warnings
        assert any(f"not pushed to {down.address}/raas-env (kept here)" in w for w in warnings), warnings
    finally:
        host.close()
        remove(docker_client, prepared and prepared.snapshot)


def test_a_registry_image_not_of_the_key_is_ignored_and_the_setup_runs(
    running: Registry,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given: under the key's tag, the registry holds an image labelled with another key
    repository = f"{running.address}/raas-env"
    env = config("mislabelled")
    workdir = checkout(tmp_path, "one")
    key = snapshot_key(env, docker_client.images.get(SANDBOX_IMAGE).id, workdir)
    # (dated now: a worker collecting old snapshots in a test running beside this one leaves it)
    labels = f'"{KEY_LABEL}"="not-{key}" "raas.environment.created"="{int(time.time())}"'
    dockerfile = io.BytesIO(f"FROM {SANDBOX_IMAGE}\nLABEL {labels}\n".encode())
    docker_client.images.build(fileobj=dockerfile, tag=f"{repository}:{key[:40]}", pull=False)
    for line in docker_client.api.push(repository, tag=key[:40], stream=True, decode=True):
        assert not line.get("error"), line
    docker_client.images.remove(f"{repository}:{key[:40]}", force=True)
    assert running.tags("raas-env") == [key[:40]]
    host = Environments(tmp_path / "state", SANDBOX_IMAGE, False, registry=repository)
    prepared = None
    try:
        # When: a worker lacking the snapshot prepares the environment
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            prepared = host.prepare(env, workdir)
        # Then: the pulled image is not used (nor kept); the setup runs here, its snapshot replaces it
        assert prepared.built
        assert prepared.pulled is None
        assert f"{repository}:{key[:40]} in the registry is not of key {key}: ignored" in caplog.text
        assert run_with_environment(prepared, workdir, "cat .venv/setup-runs") == (0, "ran\n")
        with pytest.raises(ImageNotFound):
            docker_client.images.get(f"{repository}:{key[:40]}")
        assert docker_client.images.get(f"{SNAPSHOT_REPO}:{key[:40]}").labels[KEY_LABEL] == key
    finally:
        host.close()
        remove(docker_client, prepared and prepared.snapshot)


def test_the_registry_setting_is_read_and_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAAS_SNAPSHOT_REGISTRY", "127.0.0.1:5000/raas-env")
    get_settings.cache_clear()
    try:
        assert Environments(tmp_path, SANDBOX_IMAGE, False).registry == "127.0.0.1:5000/raas-env"
        assert Environments(tmp_path, SANDBOX_IMAGE, False, registry="").registry == ""
        monkeypatch.setenv("RAAS_SNAPSHOT_REGISTRY", "Registry.example:5000/Raas Env")
        get_settings.cache_clear()
        with pytest.raises(InvalidInput) as caught:
            Environments(tmp_path, SANDBOX_IMAGE, False)
        assert str(caught.value).startswith("RAAS_SNAPSHOT_REGISTRY: String should match pattern")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
