"""One ``docker exec`` (or a container's own process, attached) driven over its hijacked
connection, with a deadline on every read.

docker-py has no exec timeout (docker-py#2651) and its ``exec_start(socket=True)`` drops
whatever the HTTP reader buffered past the response headers, so we start the exec ourselves,
keep the buffered reader, demultiplex the 8-byte-header frames and put a socket timeout on
every read. :class:`HelperClient` speaks the JSON-line protocol of :mod:`workers.sandbox.helper`.

A sandbox's helper is normally the container's own command (:func:`helper_command`), reached by
attaching to the container before it starts: a ``docker exec`` costs the engine a runtime
process and a round of namespace joins, ~90 ms of CPU per container on this machine's numbers.
The command is a shell that runs the helper, prints ``{"exited": CODE}`` when it ends and then
keeps the container up, so a helper that died (or an image without python3, code 127) is
answered as before: a helper started with ``docker exec``, or one ``docker exec`` per call.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import inspect
import json
import logging
import socket
import struct
import time
from typing import Any

from docker import APIClient

from shared.errors import PathOutsideWorkspace, SandboxError, StreamClosed
from workers.sandbox import helper

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2
_STDERR_KEEP = 4096
HELPER_SOURCE = inspect.getsource(helper)
READY = b'{"ready": true}'
EXITED = b'{"exited": '
_PYTHON = ["python3", "-I", "-S", "-c"]  # the helper's interpreter, exec'd or the container's command


def helper_command(workspace: str) -> list[str]:
    """The container command that is its helper (see the module's docstring)."""
    script = f'{" ".join(_PYTHON)} "$0" "$1"; echo "{{\\"exited\\": $?}}"; exec sleep infinity'
    return ["sh", "-c", script, HELPER_SOURCE, workspace]


class DeadlineExceeded(Exception):
    """The sandbox did not answer in time; the caller kills it and raises ToolTimeout.

    A local control-flow signal (shared/errors.py holds the errors callers see).
    """


class ExecStream:
    """stdin, stdout and stderr of one exec'd process (no TTY)."""

    def __init__(self, api: APIClient, exec_id: str, response: Any) -> None:
        self._api = api
        self.exec_id = exec_id
        self._response = response
        self._reader = response.raw._fp.fp  # the BufferedReader that read the headers
        self._sock: socket.socket = self._reader.raw._sock
        self._frames = bytearray()
        self._stdout = bytearray()
        self.stderr = bytearray()
        self.eof = False

    @classmethod
    def attach(cls, api: APIClient, container_id: str) -> ExecStream:
        """The container's own process's stdin, stdout and stderr; attach before it starts, or
        what it prints first is lost (the sandbox's log driver keeps nothing)."""
        response = api._post(
            api._url("/containers/{0}/attach", container_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1},
            stream=True,
        )
        api._raise_for_status(response)
        return cls(api, "", response)

    @classmethod
    def open(cls, api: APIClient, container_id: str, cmd: list[str], *, stdin: bool = False) -> ExecStream:
        """Start ``cmd`` in the container as its default user, in its working directory."""
        exec_id = api.exec_create(container_id, cmd, stdin=stdin, stdout=True, stderr=True, tty=False)["Id"]
        response = api._post_json(
            api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": False, "Detach": False},
            stream=True,
        )
        api._raise_for_status(response)
        return cls(api, exec_id, response)

    def send(self, data: bytes, deadline: float) -> None:
        self._sock.settimeout(_remaining(deadline))
        try:
            self._sock.sendall(data)
        except TimeoutError as e:
            raise DeadlineExceeded from e
        except OSError as e:
            msg = f"the sandbox process stopped reading: {e}"
            raise StreamClosed(msg) from e

    def close_stdin(self) -> None:
        """Half-close: the process sees EOF on stdin, its output still flows back."""
        self._sock.shutdown(socket.SHUT_WR)

    def read_line(self, deadline: float) -> bytes:
        """The next stdout line (without its newline)."""
        while True:
            end = self._stdout.find(b"\n")
            if end >= 0:
                line = bytes(self._stdout[:end])
                del self._stdout[: end + 1]
                return line
            if self.eof:
                raise StreamClosed(self._ended_message())
            self._fill(deadline)

    def read_to_eof(self, deadline: float) -> bytes:
        """All of stdout until the process closes it."""
        while not self.eof:
            self._fill(deadline)
        out = bytes(self._stdout)
        self._stdout.clear()
        return out

    def exit_code(self) -> int | None:
        """The exec'd process's exit code (None for an attached container process)."""
        if not self.exec_id:
            return None
        code = self._api.exec_inspect(self.exec_id).get("ExitCode")
        return code if isinstance(code, int) else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(Exception):
            self._response.close()

    def _fill(self, deadline: float) -> None:
        self._sock.settimeout(_remaining(deadline))
        try:
            chunk = self._reader.read1(1 << 16)
        except TimeoutError as e:
            raise DeadlineExceeded from e
        except OSError as e:
            log.debug("exec %s: connection broke: %s", self.exec_id[:12], e)
            chunk = b""
        if not chunk:
            self.eof = True
            return
        self._frames += chunk
        self._split_frames()

    def _split_frames(self) -> None:
        while len(self._frames) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self._frames)
            if len(self._frames) < _HEADER.size + size:
                return
            payload = self._frames[_HEADER.size : _HEADER.size + size]
            del self._frames[: _HEADER.size + size]
            if stream == _STDERR:
                self.stderr = (self.stderr + payload)[-_STDERR_KEEP:]
            else:
                self._stdout += payload

    def _ended_message(self) -> str:
        err = self.stderr.decode("utf-8", "replace").strip()
        return f"the sandbox process ended: {err}" if err else "the sandbox process ended"


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded
    return left


class HelperClient:
    """Requests to the helper running in the container: one JSON line each way."""

    def __init__(self, stream: ExecStream) -> None:
        self._stream = stream
        self._next_id = 0

    @classmethod
    def start(
        cls, api: APIClient, container_id: str, workspace: str, timeout_s: float
    ) -> HelperClient | None:
        """Start the helper with ``docker exec`` and wait until it is ready; None if the image has
        no python3."""
        stream = ExecStream.open(api, container_id, [*_PYTHON, HELPER_SOURCE, workspace], stdin=True)
        return cls.ready(stream, timeout_s)

    @classmethod
    def ready(cls, stream: ExecStream, timeout_s: float) -> HelperClient | None:
        """The helper on ``stream`` once it says it is ready; None if the image has no python3."""
        deadline = time.monotonic() + timeout_s
        code: int | None = None
        try:
            first = stream.read_line(deadline)
            if first == READY:
                return cls(stream)
            if first.startswith(EXITED):  # the container's command says how its helper ended
                said, code = bytes(stream.stderr), int(json.loads(first)["exited"])
            else:
                said = first + stream.read_to_eof(deadline)  # Docker's "executable file not found"
        except StreamClosed as e:
            said = str(e).encode()
        except BaseException:
            stream.close()
            raise
        code = stream.exit_code() if code is None else code
        stream.close()
        if code in (126, 127):  # the runtime could not exec python3: not in this image
            return None
        tail = said[-300:].decode("utf-8", "replace")
        msg = f"the sandbox helper did not start (exit {code}): {tail}"
        raise SandboxError(msg)

    def request(self, op: str, wait_s: float, **params: Any) -> dict[str, Any]:
        """Send one request and wait for its answer; raises what the helper's error means."""
        self._next_id += 1
        deadline = time.monotonic() + wait_s
        line = json.dumps({"id": self._next_id, "op": op, **params}).encode() + b"\n"
        self._stream.send(line, deadline)
        answer = json.loads(self._stream.read_line(deadline))
        if "exited" in answer:  # the container's command: its helper ended
            msg = f"the sandbox helper exited with {answer['exited']}"
            raise StreamClosed(msg)
        if answer.get("id") != self._next_id:
            msg = f"the sandbox helper answered request {answer.get('id')}, not {self._next_id}"
            raise SandboxError(msg)
        if answer["ok"]:
            result: dict[str, Any] = answer["result"]
            return result
        raise _error(answer, params.get("path") or params.get("pattern"))

    def close(self) -> None:
        self._stream.close()


def _error(answer: dict[str, Any], path: str | None) -> Exception:
    kind, message = answer.get("kind"), str(answer.get("message", ""))
    if kind == "outside":
        return PathOutsideWorkspace(message)
    if kind == "oserror":
        code = int(answer.get("errno") or errno.EIO)
        return OSError(code, message, path)  # OSError(ENOENT, ...) is a FileNotFoundError
    return SandboxError(f"the sandbox helper refused the request: {message}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
