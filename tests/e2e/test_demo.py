"""`bash scripts/demo.sh`, the README's first command: it runs examples/hello, and whatever it
starts it stops — when the run ends and on Ctrl-C, embedded and distributed.

The demo runs in a session of its own. A process keeps its session when its parent dies, so
whatever the demo started and left behind is found by that session id, never by a name (another
run's `raas scripted-model` is not ours to judge or to kill).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.stack import ROOT_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

DEMO = ROOT_DIR / "scripts/demo.sh"


def _in_session(session_id: int) -> dict[int, str]:
    """The live processes of a session, by pid, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended while we looked
            continue
        # pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == session_id and state != "Z":
            found[int(entry.name)] = command.strip()
    return found


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def demo(tmp_path: Path, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    """The demo in a new session (its own process group, as a terminal gives a command)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "RAAS_DATA_DIR")
    }
    environment.update({"RAAS_DEMO_DIR": str(tmp_path / "demo"), "PYTHONUNBUFFERED": "1", **env})
    proc = subprocess.Popen(
        ["bash", str(DEMO), *args],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # Ctrl-C as a terminal gives it: a test run started in the background (`cmd &` in a
        # non-interactive shell) has SIGINT ignored, and a child would inherit that.
        preexec_fn=_sigint_default,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _in_session(proc.pid):  # what the demo left: ours to remove, and only that
            os.kill(pid, signal.SIGKILL)
        assert proc.stdout is not None
        proc.stdout.close()


def _read_until(proc: subprocess.Popen[str], pattern: str) -> tuple[list[str], re.Match[str]]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if match := re.search(pattern, line):
            return lines, match
    pytest.fail(f"the demo ended without printing {pattern!r}:\n{''.join(lines)}")


def _model_port(proc: subprocess.Popen[str]) -> tuple[list[str], int]:
    lines, match = _read_until(proc, r"the scripted model answers .*, port (\d+)")
    return lines, int(match.group(1))


def _finish(proc: subprocess.Popen[str], lines: list[str]) -> str:
    assert proc.stdout is not None
    output = "".join([*lines, proc.stdout.read()])
    proc.wait()
    return output


def test_the_demo_runs_hello_and_leaves_nothing_running(tmp_path: Path) -> None:
    # Given the README's first command, run to its end
    with demo(tmp_path) as proc:
        lines, port = _model_port(proc)
        output = _finish(proc, lines)
        # Then hello ran, and nothing the demo started is still running or holds the model's port
        assert proc.returncode == 0, output
        assert "completed: hello" in output
        assert _in_session(proc.pid) == {}
        assert _refused(port)


def test_ctrl_c_on_the_demo_stops_the_run_and_what_it_started(tmp_path: Path) -> None:
    # (hello's script, its first answer held for a minute: the run is still under way at Ctrl-C
    # however fast or slow the machine; unchanged, hello could end before the signal arrived)
    script = json.loads((ROOT_DIR / "examples/scripts/hello.json").read_text())
    script["responses"][0]["latency_s"] = 60
    slow = tmp_path / "hello-slow.json"
    slow.write_text(json.dumps(script))
    with demo(tmp_path, RAAS_DEMO_SCRIPT=str(slow)) as proc:
        # Given the demo with `raas run` under way
        lines, port = _model_port(proc)
        more, _ = _read_until(proc, r"iteration_started")
        # When Ctrl-C reaches its process group, as a terminal sends it
        os.killpg(proc.pid, signal.SIGINT)
        output = _finish(proc, [*lines, *more])
        # Then the run is stopped, and nothing the demo started survives it
        assert proc.returncode == 130, output
        assert _in_session(proc.pid) == {}
        assert _refused(port)


def test_the_distributed_demo_stops_its_coordinator_worker_and_model(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given the distributed demo on this session's database and Redis
    with demo(tmp_path, "--distributed") as proc:
        lines, port = _model_port(proc)
        output = _finish(proc, lines)
        # Then hello ran through a coordinator and a worker, and none of them is left running
        assert proc.returncode == 0, output
        assert 'print("Hello, Constellation!")' in output
        assert _in_session(proc.pid) == {}
        assert _refused(port)
