"""DESIGN.md rule 4, checked from inside a real sandbox container."""

from __future__ import annotations

import socket
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


# What the sandbox has of a network, read from inside: its interfaces, then its IPv4 routes.
INTERFACES = "ls /sys/class/net"
ROUTES = "tail -n +2 /proc/net/route | cut -f1,2"


def _connect(port: int, listen: bool = False) -> str:
    """A probe that connects to the sandbox's own 127.0.0.1:``port`` (listening there first if told)."""
    return (
        "python3 - <<'EOF'\n"
        "import socket\n"
        f"server = socket.create_server(('127.0.0.1', {port})) if {listen} else None\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=3).close(); print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', e)\n"
        "EOF"
    )


def test_without_network_the_container_has_network_mode_none_and_only_loopback(
    sandbox: DockerSandbox, docker_client: docker.DockerClient
) -> None:
    # The proof of isolation is the configuration and what it gave the container, not a
    # connection that fails: no test may aim at an address off loopback to see it fail.
    info = docker_client.api.inspect_container(sandbox.container_id)
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert info["NetworkSettings"]["Networks"].keys() <= {"none"}
    assert sandbox.run(INTERFACES).output.split() == ["lo"]
    assert sandbox.run(ROUTES).output == ""  # no route anywhere, not even a default one


def test_the_sandbox_loopback_is_its_own_not_the_hosts(sandbox: DockerSandbox, host_listener: int) -> None:
    # Given a listener on the host's 127.0.0.1, when the sandbox connects to that address
    reached = sandbox.run(_connect(host_listener)).output
    # Then it reaches its own loopback, where nothing listens (the host's network namespace,
    # Docker's "host" mode, would connect)
    assert reached.startswith("refused"), reached
    assert "Connection refused" in reached
    # And the probe does connect where something listens on the sandbox's own loopback
    assert sandbox.run(_connect(host_listener, listen=True)).output == "connected\n"


def test_network_allowed_by_the_project_gives_a_bridge_interface_and_a_default_route(
    make_sandbox: SandboxFactory, docker_client: docker.DockerClient
) -> None:
    # What this proves: the product's `network = true` gives the container Docker's bridge, an
    # interface beyond loopback and a default route through it. What it does not: that traffic
    # leaves the host (a test may not aim at the bridge's private-range addresses, or beyond).
    sandbox = make_sandbox(network=True)
    info = docker_client.api.inspect_container(sandbox.container_id)
    assert info["HostConfig"]["NetworkMode"] == "bridge"
    interfaces = sandbox.run(INTERFACES).output.split()
    assert "lo" in interfaces
    assert len(interfaces) > 1
    routes = [line.split("\t") for line in sandbox.run(ROUTES).output.splitlines()]
    assert any(destination == "00000000" and iface != "lo" for iface, destination in routes), routes
    # And its loopback is still its own
    assert sandbox.run(_connect(8000, listen=True)).output == "connected\n"


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
    sandbox.run(":(){ :|:& };:", timeout_s=10)
    after = sandbox.run("echo alive; ps -e --no-headers | wc -l")
    lines = after.output.split()
    assert lines[0] == "alive"
    assert int(lines[1]) < 10  # the bomb is gone, not merely capped


def test_a_command_that_never_ends_is_killed_at_its_timeout(sandbox: DockerSandbox) -> None:
    # A call that returns at all has not waited out the sleep; timed_out says the command's own
    # timeout ended it (the client-side deadline would have killed the container instead).
    result = sandbox.run("echo started; sleep 1000", timeout_s=1)
    assert result.timed_out
    assert result.exit_code is None
    assert result.output == "started\n"
    assert sandbox.run("pgrep -c -x -f 'sleep 1000' || true").output.strip() == "0"  # killed too
    assert sandbox.run("echo alive").output == "alive\n"


def test_a_gigabyte_of_output_comes_back_capped_with_a_note(sandbox: DockerSandbox) -> None:
    # How long it takes is a figure of tests/benchmarks/bench_sandbox.py, not a promise here.
    result = sandbox.run("head -c 1000000000 /dev/zero | tr '\\0' 'x'; echo; echo the-end")
    limit = sandbox.limits.output_limit_bytes
    assert result.exit_code == 0
    assert result.truncated_bytes > 999_000_000
    assert f"[output truncated: {result.truncated_bytes} bytes cut]" in result.output
    assert len(result.output) < limit + 100
    assert result.output.endswith("the-end\n")  # the tail is kept as well as the head


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
