"""A long-running process in a sandbox container (an agent CLI), its output read as it comes.

Unlike a tool call, which the in-container helper runs and answers in one piece, an agent CLI
runs for minutes and prints one JSON line per event: the caller reads its stdout line by line
while it runs (``lines()``), keeps the tail of its stderr for the error message of a crash, and
gets its exit code at the end. stdin is not attached, so the process reads end-of-file at once
(Codex waits on an open stdin). A timer kills the container at the deadline: a hung process
cannot hold an iteration past its wall-clock limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Generator
from typing import Any

from docker import APIClient
from docker.errors import APIError, DockerException

log = logging.getLogger(__name__)
STDERR_KEEP_BYTES = 8192
MAX_LINE_BYTES = 16 * 1024**2  # a longer line is cut: one event never holds more


class ContainerProcess:
    """One ``docker exec`` of a command, streaming; iterate :meth:`lines`, then read ``exit_code``."""

    def __init__(self, api: APIClient, exec_id: str, stream: Any, timer: threading.Timer) -> None:
        self._api = api
        self._exec_id = exec_id
        self._stream = stream
        self._timer = timer
        self._stderr = bytearray()
        self.timed_out = False
        self.exit_code: int | None = None

    @classmethod
    def start(
        cls,
        api: APIClient,
        container_id: str,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        timeout_s: float,
        on_timeout: Callable[[], None],
    ) -> ContainerProcess:
        exec_id = api.exec_create(
            container_id, argv, stdout=True, stderr=True, tty=False, environment=env, workdir=workdir
        )["Id"]
        stream = api.exec_start(exec_id, stream=True, demux=True)
        holder: list[ContainerProcess] = []

        def expire() -> None:
            holder[0].timed_out = True
            on_timeout()

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        process = cls(api, exec_id, stream, timer)
        holder.append(process)
        timer.start()
        return process

    def lines(self) -> Generator[str, None, None]:
        """stdout, one decoded line at a time as the process prints it, until it exits (or the
        generator is closed: its stream is closed then too, not left to the garbage collector)."""
        pending = bytearray()
        try:
            try:
                for out, err in self._stream:
                    if err:
                        self._stderr += err
                        del self._stderr[:-STDERR_KEEP_BYTES]
                    if not out:
                        continue
                    pending += out
                    while (end := pending.find(b"\n")) >= 0:
                        line, pending[:] = bytes(pending[:end]), pending[end + 1 :]
                        yield line.decode(errors="replace")
                    if len(pending) > MAX_LINE_BYTES:
                        log.warning("an agent printed a line over %d bytes; it is cut", MAX_LINE_BYTES)
                        yield bytes(pending[:MAX_LINE_BYTES]).decode(errors="replace")
                        pending.clear()
            except (DockerException, OSError) as e:  # the container was killed under the stream
                log.info("agent process stream ended: %s", e)
            if pending.strip():
                yield bytes(pending).decode(errors="replace")
        finally:
            self._finish()

    def stderr_tail(self, max_lines: int = 20) -> str:
        """The last lines the process wrote to stderr (what a crash says about itself)."""
        lines = self._stderr.decode(errors="replace").strip().splitlines()
        return "\n".join(lines[-max_lines:])

    def _finish(self) -> None:
        self._timer.cancel()
        with contextlib.suppress(Exception):  # docker-py's CancellableStream: shuts the socket down
            self._stream.close()
        # Its socket.close() leaves the descriptor open while the response's reader holds it, in a
        # reference cycle (docker-py hangs the response on that reader): closed here, not by the
        # garbage collector with a ResourceWarning.
        with contextlib.suppress(Exception):
            self._stream._response.close()
        try:
            self.exit_code = self._api.exec_inspect(self._exec_id).get("ExitCode")
        except (APIError, DockerException, OSError) as e:
            log.info("cannot read the agent process's exit code: %s", e)


class HostProcess:
    """An agent CLI run straight on the host (the local sandbox): same interface, no isolation.

    It runs in a session of its own, so the deadline kills it and whatever it started.
    """

    def __init__(self, argv: list[str], env: dict[str, str], workdir: str, timeout_s: float) -> None:
        self._proc = subprocess.Popen(  # noqa: S603  (the pinned agent CLI, as the user allowed)
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._stderr = bytearray()
        self._reader = threading.Thread(target=self._read_stderr, name="agent-stderr", daemon=True)
        self._reader.start()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True
        self._timer.start()
        self.timed_out = False
        self.exit_code: int | None = None

    def lines(self) -> Generator[str, None, None]:
        assert self._proc.stdout is not None
        read_to_the_end = False
        try:
            for raw in self._proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
            read_to_the_end = True
        finally:
            self._end(read_to_the_end)

    def _end(self, read_to_the_end: bool) -> None:
        if read_to_the_end:
            self.exit_code = self._proc.wait()
        self._timer.cancel()
        # What it left running in its session (a relay, a background command) ends with it, as
        # it would with its container; so does the process itself when its reader stopped early.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        if not read_to_the_end:
            self.exit_code = self._proc.wait()
        self._reader.join(timeout=5)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def stderr_tail(self, max_lines: int = 20) -> str:
        lines = self._stderr.decode(errors="replace").strip().splitlines()
        return "\n".join(lines[-max_lines:])

    def _read_stderr(self) -> None:
        stream = self._proc.stderr
        assert stream is not None
        while chunk := os.read(stream.fileno(), 65536):
            self._stderr += chunk
            del self._stderr[:-STDERR_KEEP_BYTES]

    def _expire(self) -> None:
        self.timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
