"""Workspaces in an object store, end to end (issue #29): examples/hello runs through a coordinator
configured with RAAS_WORKSPACE_STORE (moto's S3 server on loopback) and a worker, as separate
processes; its workspace is then in the bucket, not on the coordinator's disk, and a second
replica with a disk of its own serves it after the first one's cache is wiped.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.loopback import free_port
from tests.support.object_store import ObjectStoreServer, moto_server
from tests.support.replicas import cli_at, replica_url
from tests.support.stack import RAAS, ROOT_DIR, Stack, parse_json_lines, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def s3() -> Iterator[ObjectStoreServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def stack(services: dict[str, str], s3: ObjectStoreServer, tmp_path: Path) -> Iterator[Stack]:
    bucket = s3.make_bucket("e2e-workspaces")
    # The lease holder sweeps the store at every pass (hourly by default).
    env = {**s3.env(bucket), "RAAS_DATA_DIR": str(tmp_path / "replica-a"), "RAAS_WORKSPACE_SWEEP_S": "0.1"}
    running = Stack(log_dir=tmp_path / "logs", script=ROOT_DIR / "examples/scripts/hello.json", env=env)
    yield running.start()
    running.stop()


def test_a_project_runs_with_its_workspace_in_the_object_store_and_another_replica_serves_it(
    stack: Stack, s3: ObjectStoreServer, tmp_path: Path
) -> None:
    # Given a coordinator whose workspaces live in the object store
    # When examples/hello is submitted and runs to its end
    submitted = stack.cli("submit", str(ROOT_DIR / "examples/hello"), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id = parse_json_lines(submitted.stdout.replace("\n", " ") + "\n")[0]["id"]
    followed = stack.cli("follow", project_id, "--json", timeout_s=240)
    assert followed.returncode == 0, followed.stdout + followed.stderr + stack.logs()
    assert parse_json_lines(followed.stdout)[-1]["type"] == "project_completed"

    # Then the workspace is in the bucket (its base; the few small increments since are in
    # Postgres), and the coordinator's disk holds only a cache
    keys = s3.keys("e2e-workspaces")
    assert [key.split("/")[1] for key in keys] == [project_id]
    data_a = Path(stack.env["RAAS_DATA_DIR"])
    assert not (data_a / "workspaces" / f"{project_id}.git").exists()
    assert (data_a / "workspace-cache" / f"{project_id}.git").is_dir()

    # When that cache is wiped and a second replica with a disk of its own starts
    shutil.rmtree(data_a / "workspace-cache")
    port = free_port()
    env_b = {**stack.env, "RAAS_DATA_DIR": str(tmp_path / "replica-b")}
    with (stack.log_dir / "replica-b.log").open("ab") as log:
        stack.procs["replica-b"] = subprocess.Popen(
            [*RAAS, "coordinator", "--port", str(port)],
            env=env_b,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_http(f"{replica_url(port)}/readyz", proc=stack.procs["replica-b"])

    # Then the second replica gives the final workspace, with the agent's program in it
    pulled = cli_at(stack, replica_url(port), "pull", project_id, str(tmp_path / "pulled"))
    assert pulled.returncode == 0, pulled.stderr + stack.logs()
    assert (tmp_path / "pulled" / "hello.py").read_text() == 'print("Hello, Constellation!")\n'
    # And the first, its cache gone, still answers the project's diff from the store
    diff = stack.cli("diff", project_id)
    assert diff.returncode == 0, diff.stderr + stack.logs()
    assert '+print("Hello, Constellation!")' in diff.stdout

    # When a write's upload is left in the bucket by a crash before its commit (no row names it)
    orphan = f"workspaces/{project_id}/000000000099-0badf00d.pack"
    s3.client().put_object(Bucket="e2e-workspaces", Key=orphan, Body=b"PACK")
    # Then the lease holder's sweep deletes it, and only it
    deadline = time.monotonic() + 60
    while orphan in s3.keys("e2e-workspaces") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert s3.keys("e2e-workspaces") == keys, stack.logs()
