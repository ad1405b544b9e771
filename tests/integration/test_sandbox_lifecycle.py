"""Starting, naming, labelling, removing and reaping sandbox containers."""

from __future__ import annotations

import gc
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from shared.errors import SandboxError, SandboxStartError, ToolTimeout
from tests.support import sandboxes as fx
from tests.support.sandboxes import SandboxFactory
from workers.sandbox import docker as docker_sandbox
from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.reaper import reap

pytestmark = [pytest.mark.docker, pytest.mark.integration]

CALLER_LABELS = {"raas.project": "p1", "raas.iteration": "it-7", "raas.attempt": "1", "raas.worker": "w1"}


def _exists(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.api.inspect_container(container_id)
    except NotFound:
        return False
    return True


def test_the_container_is_labelled_and_close_removes_it(
    make_sandbox: SandboxFactory, docker_client: docker.DockerClient
) -> None:
    sandbox = make_sandbox(labels=CALLER_LABELS)
    labels = docker_client.api.inspect_container(sandbox.container_id)["Config"]["Labels"]
    assert labels["raas.managed"] == "true"
    assert CALLER_LABELS.items() <= labels.items()
    sandbox.close()
    assert not _exists(docker_client, sandbox.container_id)
    sandbox.close()  # idempotent


def test_a_closed_sandbox_refuses_calls(sandbox: DockerSandbox) -> None:
    sandbox.close()
    with pytest.raises(SandboxError, match="closed"):
        sandbox.run("true")


def test_workspace_changes_are_on_the_host_and_owned_by_the_sandbox_user(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    # Given a host workspace with a file created by root
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README.md").write_text("hi\n")
    sandbox = make_sandbox(workspace=workspace)
    # When the sandbox edits it and creates another
    sandbox.run("echo more >> README.md && mkdir -p src && echo 'print(1)' > src/main.py")
    sandbox.write_file("notes.txt", b"written by a tool\n")
    # Then the host sees every change
    assert (workspace / "README.md").read_text() == "hi\nmore\n"
    assert (workspace / "src" / "main.py").read_text() == "print(1)\n"
    assert (workspace / "notes.txt").read_bytes() == b"written by a tool\n"
    assert (workspace / "src").stat().st_uid == 1000


def test_a_name_already_taken_raises_sandbox_start_error(
    sandbox: DockerSandbox, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    with pytest.raises(SandboxStartError, match="already exists"):
        DockerSandbox.start(
            image=fx.SANDBOX_IMAGE,
            host_workspace=tmp_path,
            limits=SandboxLimits(),
            labels={fx.RUN_LABEL: fx.RUN_ID},
            name=sandbox.name,
            client=docker_client,
        )
    assert sandbox.run("echo still mine").output == "still mine\n"


def test_a_missing_image_raises_with_the_build_hint(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    with pytest.raises(SandboxStartError, match="build-offline.sh"):
        DockerSandbox.start(
            image="constellation-sandbox:no-such-tag",
            host_workspace=tmp_path,
            limits=SandboxLimits(),
            labels={fx.RUN_LABEL: fx.RUN_ID},
            name=f"raas-test-{fx.RUN_ID}-{secrets.token_hex(4)}",
            client=docker_client,
        )


def test_two_sandboxes_with_different_names_run_in_parallel(make_sandbox: SandboxFactory) -> None:
    # Given two commands that each say they started, then wait for a "go" the test gives only
    # once both have started: run one after the other, the first would wait out its timeout
    first, second = make_sandbox(), make_sandbox()
    both = (first, second)
    wait_for_go = "touch started; until [ -e go ]; do sleep 0.05; done; hostname"
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(sandbox.run, wait_for_go, 20) for sandbox in both]
        deadline = time.monotonic() + 60
        while not all((s.host_workspace / "started").exists() for s in both) and time.monotonic() < deadline:
            time.sleep(0.05)
        for sandbox in both:
            (sandbox.host_workspace / "go").touch()
        results = [call.result() for call in running]
    # Then both were running at once, and each in its own workspace
    assert [(r.exit_code, r.timed_out) for r in results] == [(0, False), (0, False)], results
    first.write_file("only-in-first", b"")
    assert "only-in-first" not in second.list_glob("*")


def test_a_sandbox_that_overruns_the_client_deadline_is_killed(
    sandbox: DockerSandbox, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a sandbox that stops answering (paused: its helper cannot reply)
    monkeypatch.setattr(docker_sandbox, "FILE_OP_TIMEOUT_S", 1.0)
    docker_client.api.pause(sandbox.container_id)
    # When a call waits for it, then it times out on our side and the container is killed
    with pytest.raises(ToolTimeout):
        sandbox.read_file("anything")
    assert docker_client.api.inspect_container(sandbox.container_id)["State"]["Running"] is False
    with pytest.raises(SandboxError, match="killed"):
        sandbox.run("true")


def test_the_reaper_removes_an_orphan_and_leaves_a_live_one(
    make_sandbox: SandboxFactory, docker_client: docker.DockerClient
) -> None:
    live = make_sandbox(labels={**CALLER_LABELS, "raas.iteration": f"live-{fx.RUN_ID}"})
    orphan = make_sandbox(labels={**CALLER_LABELS, "raas.iteration": f"dead-{fx.RUN_ID}"})

    def is_live(labels: dict[str, str]) -> bool:
        # Only judge this test's containers: others on the engine are not ours to reap.
        return labels.get(fx.RUN_LABEL) != fx.RUN_ID or not labels["raas.iteration"].startswith("dead-")

    removed = reap(docker_client, is_live)
    assert removed == [orphan.name]
    assert not _exists(docker_client, orphan.container_id)
    assert live.run("echo alive").output == "alive\n"


def test_the_reaper_keeps_a_container_when_liveness_cannot_be_told(
    sandbox: DockerSandbox, docker_client: docker.DockerClient
) -> None:
    def is_live(labels: dict[str, str]) -> bool:
        if labels.get(fx.RUN_LABEL) == fx.RUN_ID:
            msg = "database down"
            raise RuntimeError(msg)
        return True

    assert reap(docker_client, is_live) == []
    assert _exists(docker_client, sandbox.container_id)


def test_a_helper_that_dies_is_restarted_and_the_sandbox_keeps_working(sandbox: DockerSandbox) -> None:
    # Given a command that kills the helper running it (as the OOM killer might)
    with pytest.raises(SandboxError, match="restarted"):
        sandbox.run("kill -9 $(pgrep -o -x python3)")
    # Then the next call finds a new helper
    assert sandbox.run("echo back").output == "back\n"
    assert sandbox.uses_helper


def test_agent_processes_that_exited_leave_no_socket_to_the_garbage_collector(sandbox: DockerSandbox) -> None:
    # Given agent processes that printed their line and exited, each read to its end
    for _ in range(5):
        process = sandbox.spawn(["sh", "-c", "echo done; exit 3"], {}, 30.0)
        assert list(process.lines()) == ["done"]
        assert process.exit_code == 3
    # When the garbage collector runs
    del process
    gc.collect()
    # Then it found no stream's socket still open: its "unclosed socket" ResourceWarning (raised
    # from a finalizer, in an order that varies, hence several processes) fails this test, as
    # warnings are errors


def test_an_agent_process_read_only_in_part_is_ended_with_its_reader(sandbox: DockerSandbox) -> None:
    # Given agent processes with a 5 s limit (room for a slow exec start) whose reader stopped
    # after their first line (a parser raised, say)
    for _ in range(3):
        process = sandbox.spawn(["sh", "-c", "echo one; echo two; sleep 30"], {}, 5.0)
        lines = process.lines()
        assert next(lines) == "one"
        # When the reader is closed, as the harness session closes it
        lines.close()
    # Then their limits no longer run: the sandbox is not killed for them
    time.sleep(6.0)
    assert sandbox.run("echo alive").output == "alive\n"
    # And no stream's socket was left open for the collector to find (warnings are errors)
    del process, lines
    gc.collect()


def test_a_start_waits_for_its_turn_at_the_engine(
    make_sandbox: SandboxFactory, docker_client: docker.DockerClient
) -> None:
    # Given a process allowed one container create or removal at a time, whose one turn is taken
    tag = secrets.token_hex(4)
    docker_sandbox.ENGINE_CALLS.limit(1)
    try:
        with ThreadPoolExecutor(1) as pool:
            with docker_sandbox.ENGINE_CALLS.turn():
                # When a sandbox starts meanwhile
                starting = pool.submit(make_sandbox, labels={"raas.gate": tag})
                time.sleep(1.0)
                # Then its container is not even created while the turn is held
                assert not docker_client.containers.list(all=True, filters={"label": f"raas.gate={tag}"})
                assert not starting.done()
            # And it starts once the turn is free
            sandbox = starting.result(timeout=120)
            assert sandbox.run("echo up").output == "up\n"
    finally:
        docker_sandbox.ENGINE_CALLS.limit(None)
