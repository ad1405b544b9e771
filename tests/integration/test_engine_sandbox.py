"""Hostile tool calls from the model are contained by the iteration's sandbox (DESIGN.md rule 4).

Every address aimed at here is loopback: the sandbox has its own network namespace, so its
127.0.0.1 is not the host's.
"""

from __future__ import annotations

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
from tests.support.records import event_log, everything_recorded, iterations, text, tool
from workers.llm import client as llm

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


def test_a_sandboxed_command_cannot_reach_a_host_listener(
    services: dict[str, str], tmp_path: Path, host_listener: tuple[int, list[str]]
) -> None:
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
    services: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = f"sk-ant-test-canary-{secrets.token_hex(12)}"
    script = {
        "responses": [
            tool("bash", {"command": "env | grep -i -e anthropic -e sk-ant; echo grep=$?"}),
            tool("bash", {"command": "cat /proc/1/environ | tr '\\0' '\\n' | grep -ci anthropic"}),
            text("No key in here."),
        ]
    }
    with engine(script, tmp_path) as eng:
        eng.settings = eng.settings.model_copy(update={"anthropic_api_key": SecretStr(key)})
        project_id = eng.submit()
        eng.run_next(project_id)

        # The worker's client holds the key and sent it (the log shows the header, redacted)...
        with llm.make_client(eng.settings) as client:
            assert client.api_key == key
        assert all(r.headers.get("authorization") == "[redacted]" for r in eng.requests(project_id))
        # ...but no command sees it, and no message, event or request body holds it.
        assert _outputs(project_id) == [(False, "exit code 0\ngrep=1"), (False, "exit code 1\n0")]
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
    # The workspace's .git is inside the sandbox's reach; the worker then runs git on it, on the host.
    fsmonitor, filtered = tmp_path / "fsmonitor-ran", tmp_path / "filter-ran"
    plant = (
        f'printf \'[core]\\n\\tfsmonitor = "touch {fsmonitor}; false"\\n'
        f'[filter "x"]\\n\\tclean = "touch {filtered}; cat"\\n\' >> .git/config'
        " && echo '* filter=x' > .gitattributes && echo changed > notes.txt"
    )
    script = {"responses": [tool("bash", {"command": plant}), text("Planted.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "before\n"})
        eng.run_next(project_id)

        assert _outputs(project_id) == [(False, "exit code 0")]
        assert not fsmonitor.exists()
        assert not filtered.exists()
