"""Hostile tool calls from the model are contained by the iteration's sandbox (DESIGN.md rule 4).

Every address aimed at here is loopback: the sandbox has its own network namespace, so its
127.0.0.1 is not the host's. That it has no network at all is shown by its configuration and
interfaces (test_sandbox_hardening.py, test_hostile_input.py), never by traffic off loopback.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from shared import events
from shared.models import IterationStatus
from tests.support.engine import engine
from tests.support.records import (
    agent,
    event_log,
    everything_recorded,
    iterations,
    text,
    tool,
    workspace_git,
)
from tests.support.sandboxes import InspectedSandboxes

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on the host's loopback; yields its port and the peers that connected."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    peers: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            peers.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], peers
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _outputs(project_id: str) -> list[tuple[bool, str]]:
    return [(e.data["is_error"], e.data["output"]) for e in event_log(project_id, events.TOOL_EXECUTED)]


def test_a_sandboxed_command_does_not_share_the_hosts_loopback(
    services: dict[str, str], tmp_path: Path, host_listener: tuple[int, list[str]]
) -> None:
    # What this shows: the sandbox is not in the host's network namespace (Docker's "host"
    # mode would connect). Not that it has no network: a bridged sandbox's loopback is its own too.
    port, peers = host_listener
    # Given: the listener answers on the host (the test itself can connect).
    socket.create_connection(("127.0.0.1", port), 2).close()
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
    script = {"responses": [tool("bash", {"command": connect}), text("No network, then.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        ((is_error, output),) = _outputs(project_id)
        assert not is_error
        assert not output.startswith("exit code 0")
        assert "ConnectionRefusedError" in output or "unreachable" in output
        assert len(peers) == 1  # only the test's own connection
        assert iterations(project_id)[0].status == IterationStatus.SUCCEEDED


def test_the_api_key_never_enters_the_sandbox_the_record_or_a_log_line(
    services: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    key = f"sk-ant-test-canary-{secrets.token_hex(12)}"
    # Given a worker that holds the key as a real one does: in its environment and its settings
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    script = {
        "responses": [
            tool("bash", {"command": "env | grep -i -e anthropic -e sk-ant; echo grep=$?"}),
            tool(
                "bash",
                {"command": "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -ci -e anthropic -e sk-ant"},
            ),
            tool("bash", {"command": "grep -rIl -e sk-ant /workspace /tmp; echo grep=$?"}),
            text("No key in here."),
        ]
    }
    with engine(script, tmp_path) as eng:
        eng.settings = eng.settings.model_copy(update={"anthropic_api_key": SecretStr(key)})
        eng.sandbox_factory = started = InspectedSandboxes(eng.settings.sandbox_image)
        # When a real iteration runs: the worker's client calls the model, tools run in a container
        project_id = eng.submit()
        eng.run_next(project_id)

        # Then every model call carried a key (its value is redacted in the server's log)...
        requests = eng.requests(project_id)
        assert len(requests) == 4
        assert all(r.headers.get("authorization") == "[redacted]" for r in requests)
        # ...but not the container: not its configured environment, not any process's
        # environment, not a file in the workspace or /tmp
        ((container,),) = [started.inspected]
        assert not any(
            "canary" in variable or "ANTHROPIC" in variable for variable in container["Config"]["Env"]
        )
        assert "canary" not in json.dumps(container)
        assert _outputs(project_id) == [
            (False, "exit code 0\ngrep=1"),
            (False, "exit code 1\n0"),
            (False, "exit code 0\ngrep=1"),
        ]
        # Nor what the iteration committed, nor any message, event or request body it recorded
        assert "canary" not in workspace_git(eng, project_id, "log", "-p", "--all")
        assert key not in everything_recorded(eng, project_id)
        assert "canary" not in everything_recorded(eng, project_id)
        assert caplog.records  # the SDK, httpx and the worker logged at DEBUG...
        assert "canary" not in caplog.text  # ...and never the key


def test_a_fork_bomb_and_an_endless_command_are_stopped_and_the_iteration_goes_on(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {
        "responses": [
            tool("bash", {"command": ":(){ :|:& };:; sleep 30"}),
            tool("bash", {"command": "sleep 100000"}),
            tool("bash", {"command": "echo still-alive"}),
            text("Survived."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml="[sandbox]\ncommand_timeout_s = 2\npids = 64")
        eng.run_next(project_id)

        bomb, endless, alive = _outputs(project_id)
        assert bomb[0] is True
        assert bomb[1].startswith("timed out after 2 s; the command and everything it started were killed")
        assert endless == (True, "timed out after 2 s; the command and everything it started were killed")
        assert alive == (False, "exit code 0\nstill-alive")
        row = iterations(project_id)[0]
        assert (row.status, row.error) == (IterationStatus.SUCCEEDED, None)


def test_git_config_written_in_the_sandbox_runs_nothing_on_the_host(
    services: dict[str, str], tmp_path: Path
) -> None:
    # The agent's workspace holds a .git of its own (a clone for its use); the worker commits the
    # workspace with git on the host, through a repository of its own beside the mount. The agent
    # plants what would run commands on the host if that git read the workspace's .git: an
    # fsmonitor, a hooks path and a hook, and a clean filter for every file (which would also
    # rewrite what is committed). Each would touch a file on the host.
    ran = {name: tmp_path / f"{name}-ran" for name in ("fsmonitor", "filter", "hook")}
    hook = f"#!/bin/sh\\ntouch {ran['hook']}\\n"
    plant = "\n".join(
        [
            "cat >> .git/config <<'EOF'",
            "[core]",
            f'\tfsmonitor = "touch {ran["fsmonitor"]}; false"',
            "\thooksPath = .git/planted-hooks",
            '[filter "x"]',
            f'\tclean = "touch {ran["filter"]}; sed s/changed/FILTERED/"',
            "EOF",
            "mkdir -p .git/planted-hooks .git/hooks",
            f"printf '{hook}' | tee .git/planted-hooks/pre-commit .git/hooks/pre-commit >/dev/null",
            "chmod +x .git/planted-hooks/pre-commit .git/hooks/pre-commit",
            "echo '* filter=x' > .gitattributes && echo changed > notes.txt",
        ]
    )
    # The control: a git that reads the planted config (the sandbox's own) does apply the filter.
    control = "git add notes.txt 2>&1; git show :notes.txt 2>/dev/null"
    script = {
        "responses": [tool("bash", {"command": plant}), tool("bash", {"command": control}), text("Planted.")]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "before\n"})
        before = workspace_git(eng, project_id, "rev-parse", "main")
        eng.run_next(project_id)

        (planted, (control_failed, controlled)) = _outputs(project_id)
        assert planted == (False, "exit code 0")
        assert not control_failed
        assert "fsmonitor-ran" in controlled  # tried to, in the sandbox (the host's path is not there)
        assert controlled.endswith("\nFILTERED")
        # Then the host's git committed the iteration's work, once, as the agent...
        after = workspace_git(eng, project_id, "rev-parse", "main")
        assert workspace_git(eng, project_id, "rev-list", f"{before}..{after}") == after
        assert (
            workspace_git(eng, project_id, "log", "-1", "--format=%an", after)
            == f"agent-{agent(project_id).id}"
        )
        changed = workspace_git(eng, project_id, "diff", "--name-only", before, after).split()
        assert changed == [".gitattributes", "notes.txt"]
        # ...as the files were, unfiltered, and nothing the sandbox configured ran on the host
        assert workspace_git(eng, project_id, "show", f"{after}:notes.txt") == "changed"
        assert [name for name, marker in ran.items() if marker.exists()] == []
