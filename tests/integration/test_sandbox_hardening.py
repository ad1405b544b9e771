"""DESIGN.md rule 4, checked from inside a real sandbox container."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import docker
import pytest

from tests.support.sandboxes import SandboxFactory
from workers.sandbox.docker import DockerSandbox

pytestmark = [pytest.mark.docker, pytest.mark.integration]


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP port on the host's loopback that accepts connections."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_only_the_loopback_interface_exists_without_network(sandbox: DockerSandbox) -> None:
    result = sandbox.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert result.exit_code == 0
    assert result.output.split() == ["lo"]


def test_a_host_loopback_listener_is_unreachable_from_inside(
    sandbox: DockerSandbox, host_listener: int
) -> None:
    # Given a listener on the host's 127.0.0.1, when the sandbox connects to that address
    probe = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {host_listener}), timeout=3); print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', e)\n"
    )
    result = sandbox.run(f'python3 -c "{probe}"')
    # Then it reaches its own loopback, where nothing listens
    assert result.output.startswith("refused"), result.output


def test_network_allowed_by_the_project_gives_an_interface_beyond_loopback(
    make_sandbox: SandboxFactory,
) -> None:
    sandbox = make_sandbox(network=True)
    result = sandbox.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert "lo" in result.output.split()
    assert len(result.output.split()) > 1


def test_commands_run_as_uid_1000(sandbox: DockerSandbox) -> None:
    assert sandbox.run("id -u; id -g").output.split() == ["1000", "1000"]


def test_no_capabilities_and_no_new_privileges(sandbox: DockerSandbox) -> None:
    status = dict(
        line.split(":\t", 1)
        for line in sandbox.run("cat /proc/self/status").output.splitlines()
        if ":\t" in line
    )
    assert int(status["CapEff"], 16) == 0
    assert int(status["CapPrm"], 16) == 0
    assert int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"


def test_root_filesystem_is_read_only_but_workspace_and_tmp_are_writable(sandbox: DockerSandbox) -> None:
    assert sandbox.run("touch /usr/x").exit_code != 0
    assert "Read-only file system" in sandbox.run("touch /etc/x").output
    assert sandbox.run("touch /workspace/x /tmp/x && echo $HOME").output.strip() == "/tmp"


def test_container_configuration_carries_every_limit(
    make_sandbox: SandboxFactory, docker_client: docker.DockerClient
) -> None:
    sandbox = make_sandbox(memory="512m", cpus=0.5, pids=100)
    info = docker_client.api.inspect_container(sandbox.container_id)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["Memory"] == 512 * 1024**2
    assert host["MemorySwap"] == 512 * 1024**2
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 100
    assert host["NetworkMode"] == "none"
    assert host["Privileged"] is False
    assert info["Config"]["User"] == "1000:1000"
    assert info["Config"]["Labels"]["raas.managed"] == "true"
    assert not any(m.get("Source") == "/var/run/docker.sock" for m in info["Mounts"])


def test_memory_limit_stops_a_memory_hog_and_the_sandbox_still_answers(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(memory="128m")
    result = sandbox.run("python3 -c \"x = b'a' * (400 * 1024 * 1024); print('survived')\"")
    assert result.exit_code == 137  # SIGKILL from the OOM killer
    assert "survived" not in result.output
    assert sandbox.run("echo alive").output == "alive\n"


def test_a_fork_bomb_is_stopped_by_the_pid_limit_and_the_sandbox_still_answers(
    make_sandbox: SandboxFactory,
) -> None:
    sandbox = make_sandbox(pids=64)
    started = time.monotonic()
    sandbox.run(":(){ :|:& };:", timeout_s=10)
    after = sandbox.run("echo alive; ps -e --no-headers | wc -l")
    assert time.monotonic() - started < 15
    lines = after.output.split()
    assert lines[0] == "alive"
    assert int(lines[1]) < 10  # the bomb is gone, not merely capped


def test_a_command_that_never_ends_is_killed_at_its_timeout(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = sandbox.run("echo started; sleep 1000", timeout_s=1)
    assert result.timed_out
    assert result.exit_code is None
    assert result.output == "started\n"
    assert time.monotonic() - started < 3
    assert sandbox.run("pgrep -c -x -f 'sleep 1000' || true").output.strip() == "0"  # killed too
    assert sandbox.run("echo alive").output == "alive\n"


def test_a_gigabyte_of_output_comes_back_capped_with_a_note_quickly(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = sandbox.run("head -c 1000000000 /dev/zero | tr '\\0' 'x'; echo; echo the-end")
    elapsed = time.monotonic() - started
    limit = sandbox.limits.output_limit_bytes
    assert result.exit_code == 0
    assert result.truncated_bytes > 999_000_000
    assert f"[output truncated: {result.truncated_bytes} bytes cut]" in result.output
    assert len(result.output) < limit + 100
    assert result.output.endswith("the-end\n")  # the tail is kept as well as the head
    assert elapsed < 15


def test_the_environment_has_nothing_from_the_host(
    make_sandbox: SandboxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    monkeypatch.setenv("RAAS_SECRET_THING", "host-only")
    sandbox = make_sandbox()
    env = sandbox.run("env").output
    assert "ANTHROPIC" not in env
    assert "sk-ant-test-secret" not in env
    assert "RAAS_" not in env
    assert "sk-ant-test-secret" not in sandbox.run("cat /proc/1/environ | tr '\\0' '\\n'").output
