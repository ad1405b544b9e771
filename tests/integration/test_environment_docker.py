"""A project's environment on real Docker: the setup installs a dependency from a loopback
package index through the ``registries`` egress proxy once; later iterations start from the
snapshot and import it; a changed lockfile makes a new snapshot; a host off the list is refused
by the proxy; with ``none`` nothing is reachable. Traffic goes only to 127.0.0.1 and unix
sockets (docs/SECURITY.md): the containers have no interface but their own loopback."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from shared.project_config.environment import EnvironmentConfig
from tests.support.package_index import package_index
from tests.support.sandboxes import RUN_ID, RUN_LABEL, SANDBOX_IMAGE, run_with_environment
from workers.environment import Environments, Prepared, SetupFailed
from workers.environment.snapshot import KEY_LABEL, SETUP_LABEL, collect_snapshots

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SETUP = """set -e
python3 -c 'import os, re, urllib.request as u
i = os.environ["RAAS_INDEX"] + "/simple/pip/"
u.urlretrieve(i + re.search("href=.([^\\x22]+)", u.urlopen(i).read().decode()).group(1), "/tmp/pip.whl")'
python3 /tmp/pip.whl/pip install -q --no-cache-dir --disable-pip-version-check --target .venv/site \\
    --index-url "$RAAS_INDEX/simple/" -r requirements.txt
echo ran >> .venv/setup-runs
"""
PROBE_DENIED = """
import http.client, os, urllib.error, urllib.request
try:
    urllib.request.urlopen("http://example.com/")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
c = http.client.HTTPSConnection("127.0.0.1", 3128, timeout=10)
c.set_tunnel("example.com", 443)
try:
    c.request("GET", "/")
except OSError as e:
    print(e)
"""
IMPORT = "python3 -c 'import raas_demo_dep; print(raas_demo_dep.VERSION)'"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, docker_engine: str) -> Iterator[str]:
    with package_index(tmp_path_factory.mktemp("index")) as url:
        yield url


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory, index: str) -> Iterator[Environments]:
    envs = Environments(tmp_path_factory.mktemp("state"), SANDBOX_IMAGE, allow_full_network=False)
    yield envs
    envs.close()
    client = docker.from_env()
    for image in client.images.list(filters={"label": f"raas.test-env={RUN_ID}"}):
        client.images.remove(image.id, force=True)
    client.close()


def config(index: str, **changes: object) -> EnvironmentConfig:
    port = index.rsplit(":", 1)[1]
    table = {
        "setup": SETUP,
        "key_files": ["requirements.txt"],
        # The run's id keys the snapshot too: a snapshot of an earlier run is never reused here.
        "env": {"RAAS_INDEX": index, "PYTHONPATH": "/workspace/.venv/site", "RAAS_TEST_RUN": RUN_ID},
        "registries": [f"127.0.0.1:{port}"],
        **changes,
    }
    return EnvironmentConfig.model_validate(table)


def checkout(root: Path, name: str, requirement: str = "raas-demo-dep==1.0") -> Path:
    workdir = root / name
    workdir.mkdir()
    (workdir / "requirements.txt").write_text(f"{requirement}\n", encoding="utf-8")
    (workdir / "README").write_text("a project\n", encoding="utf-8")
    return workdir


def test_setup_runs_once_and_iteration_two_imports_what_it_installed(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    # Given: a project whose setup installs raas-demo-dep through the registries proxy
    env = config(index)
    # When: two iterations, each on a fresh checkout
    first = environments.prepare(env, checkout(tmp_path, "one"))
    second = environments.prepare(env, checkout(tmp_path, "two"))
    try:
        # Then: the setup ran for the first only, and the second starts from the same snapshot
        assert first.built
        assert not second.built
        assert first.snapshot == second.snapshot
        code, output = run_with_environment(second, tmp_path / "two", f"{IMPORT} && cat .venv/setup-runs")
        assert (code, output.split()) == (0, ["1.0", "ran"])
        # the proxy saw (and let through) the index, and nothing else
        proxy = environments.proxy_for(env.registries)
        assert {(host, allowed) for host, _, allowed in proxy.asked} == {("127.0.0.1", True)}
        # the links are the runner's, never the project's: taken out before the commit
        assert (tmp_path / "two" / ".venv").is_symlink()
        second.unlink()
        assert not (tmp_path / "two" / ".venv").is_symlink()
    finally:
        _remove(first)


def test_a_changed_lockfile_makes_a_new_snapshot(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    env = config(index)
    old = environments.prepare(env, checkout(tmp_path, "old", "raas-demo-dep==1.0"))
    new = environments.prepare(env, checkout(tmp_path, "new", "raas-demo-dep==2.0"))
    try:
        assert new.built
        assert new.snapshot != old.snapshot
        assert run_with_environment(new, tmp_path / "new", IMPORT) == (0, "2.0\n")
    finally:
        _remove(old, new)


def test_a_host_not_on_the_list_is_refused_through_the_proxy(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    env = config(index, setup=None, network="registries")
    workdir = checkout(tmp_path, "denied")
    prepared = environments.prepare(env, workdir)
    # The proxy answers without connecting anywhere: example.com is never looked up.
    code, output = run_with_environment(prepared, workdir, f"python3 -c '{PROBE_DENIED}'")
    assert code == 0, output
    plain, tunnel = output.splitlines()[-2:]
    assert plain.startswith("403 raas egress proxy: example.com:80 is not on this project's allow-list")
    assert "[environment] registries" in plain
    assert tunnel == "Tunnel connection failed: 403 Forbidden"
    asked = environments.proxy_for(env.registries).asked
    assert ("example.com", 80, False) in asked
    assert ("example.com", 443, False) in asked


def test_with_network_none_nothing_is_reachable(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    env = config(index, setup=None, network="none", env={"RAAS_INDEX": index})
    workdir = checkout(tmp_path, "none")
    prepared = environments.prepare(env, workdir)
    assert prepared.mounts.proxy_dir is None
    fetch = 'import os, urllib.request as u; u.urlopen(os.environ["RAAS_INDEX"], timeout=5)'
    probe = f"python3 -c '{fetch}' 2>&1 | tail -1; getent hosts pypi.org || echo unresolved"
    probe += "; echo proxy=${HTTPS_PROXY:-none}"
    code, output = run_with_environment(prepared, workdir, probe)
    assert "Connection refused" in output  # the container's own loopback: nothing listens there
    assert "unresolved" in output
    assert "proxy=none" in output


def test_a_failing_setup_is_reported_with_its_log_tail(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    env = config(index, setup="echo fetching things\necho 'no such package: left-pad' >&2\nexit 3")
    with pytest.raises(SetupFailed) as caught:
        environments.prepare(env, checkout(tmp_path, "failing"))
    assert "[environment] setup exited 3; its last lines:" in str(caught.value)
    assert "no such package: left-pad" in str(caught.value)


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            {"image": "raas-no-such-image:never"},
            "image 'raas-no-such-image:never' is not on this worker host",
        ),
        ({"dockerfile": "Dockerfile"}, "dockerfile 'Dockerfile' did not build"),
        ({"network": "full"}, 'network = "full" but this cluster allows containers no network'),
        ({"setup_network": "full"}, 'setup_network = "full" but this cluster allows containers no network'),
    ],
)
def test_an_environment_that_cannot_be_made_is_one_line_naming_it(
    environments: Environments, index: str, tmp_path: Path, table: dict[str, str], said: str
) -> None:
    workdir = checkout(tmp_path, "bad")
    (workdir / "Dockerfile").write_text("FROM raas-no-such-base:never\n", encoding="utf-8")
    with pytest.raises(SetupFailed) as caught:
        environments.prepare(config(index, **table), workdir)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def _remove(*prepared: Prepared) -> None:
    client = docker.from_env()
    for one in prepared:
        if one.snapshot is not None:
            client.images.remove(one.snapshot, force=True)
    client.close()


def test_old_snapshots_and_those_over_the_quota_are_collected(docker_engine: str) -> None:
    client = docker.from_env()
    made = []
    try:
        # "old" is two hours old: past this test's hour, within the worker's own week, so a
        # worker collecting in a test running beside this one leaves it for this test to take
        now = int(time.time())
        for name, created in (("old", now - 7200), ("new", now), ("newest", now + 1)):
            labels = {KEY_LABEL: name, "raas.environment.created": str(created), RUN_LABEL: RUN_ID}
            dockerfile = io.BytesIO(
                f"FROM {SANDBOX_IMAGE}\nLABEL ".encode()
                + " ".join(f'"{k}"="{v}"' for k, v in labels.items()).encode()
                + b"\n"
            )
            image, _ = client.images.build(
                fileobj=dockerfile, tag=f"raas-env-test:{RUN_ID}-{name}", pull=False
            )
            made.append(image.id)
        scope = (f"{RUN_LABEL}={RUN_ID}",)
        # An hour old is too old: only "old" goes
        assert collect_snapshots(client, 3600, 10**15, keep_tag="", labels=scope) == 1
        # Over a quota of nothing: the oldest goes, the one in use (keep_tag) stays
        kept = f"raas-env-test:{RUN_ID}-newest"
        assert collect_snapshots(client, 3600, 0, keep_tag=kept, labels=scope) == 1
        assert [i.tags for i in client.images.list(filters={"label": [KEY_LABEL, *scope]})] == [[kept]]
    finally:
        for image_id in made:
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(image_id, force=True)
        client.close()


def test_the_setup_container_carries_the_iterations_labels_for_the_sweep(
    environments: Environments, index: str, tmp_path: Path
) -> None:
    # Given: a setup that takes a while, for an iteration whose labels the sweep knows
    env = config(index, setup="sleep 4; exit 1")
    labels = {"raas.cluster": "c", "raas.iteration": f"it-{RUN_ID}", "raas.attempt": "1", RUN_LABEL: RUN_ID}
    failed: list[BaseException] = []

    def run() -> None:
        try:
            environments.prepare(env, checkout(tmp_path, "labelled"), labels)
        except SetupFailed as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # Then: while it runs, its container is one the sweep would judge by those labels
        client = docker.from_env()
        seen: list[dict[str, str]] = []
        deadline = time.monotonic() + 15
        while not seen and time.monotonic() < deadline:
            found = client.api.containers(filters={"label": [SETUP_LABEL, f"raas.iteration=it-{RUN_ID}"]})
            seen = [c["Labels"] for c in found]
            time.sleep(0.2)
        client.close()
        assert seen
        assert {k: seen[0][k] for k in labels} == labels
    finally:
        thread.join(30)
    assert failed  # and the setup's failure is still reported


def test_a_workspace_dockerfile_is_built_offline_as_the_base(
    environments: Environments, tmp_path: Path
) -> None:
    workdir = checkout(tmp_path, "dockerfile")
    (workdir / ".raas").mkdir()
    marker = f"built-{RUN_ID}"
    (workdir / ".raas" / "Dockerfile").write_text(
        f"FROM {SANDBOX_IMAGE}\nUSER root\nRUN echo {marker} > /opt/marker\nUSER 1000:1000\n",
        encoding="utf-8",
    )
    env = EnvironmentConfig(dockerfile=".raas/Dockerfile")
    prepared = environments.prepare(env, workdir)
    try:
        assert prepared.mounts.image is not None
        assert prepared.mounts.image.startswith("raas-env-base:")
        assert run_with_environment(prepared, workdir, "cat /opt/marker") == (0, f"{marker}\n")
        # the same Dockerfile again is the same image, not a second build
        assert environments.prepare(env, workdir).mounts.image == prepared.mounts.image
    finally:
        client = docker.from_env()
        client.images.remove(prepared.mounts.image or "", force=True)
        client.close()
