"""Serving the scripted model: on a TCP port and, optionally, a unix socket, from the command line
(:func:`serve`, ``raas scripted-model``) or in a background thread for tests
(:class:`ScriptedModelServer`).

It is the one fake in the system and sits at the network edge, so the real ``anthropic`` SDK is
exercised end to end (retries, SSE parsing, error classes) by tests, benchmarks and the offline
demo. What it answers is the app's (``app.py``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import uvicorn
from fastapi import FastAPI

from shared.errors import InvalidInput, ServiceUnavailable
from workers.scripted_model.app import build_app, create_app
from workers.scripted_model.script import Script
from workers.scripted_model.state import LoggedRequest, ServerState

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0


def _uvicorn_config(app: FastAPI, log_level: str) -> uvicorn.Config:
    # No lifespan, websockets or logging config of uvicorn's own: the app needs none, and a test
    # process must keep its logging setup.
    return uvicorn.Config(
        app,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        ws="none",
        http="h11",
        loop="asyncio",
        timeout_graceful_shutdown=2,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, removing the unix socket file when it shuts down: on SIGTERM uvicorn
    re-raises the signal once serving ends, so code after ``run()`` never runs."""

    def __init__(self, config: uvicorn.Config, unix_path: Path | None) -> None:
        super().__init__(config)
        self.unix_path = unix_path

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        _close([], self.unix_path)


def _listen(host: str, port: int) -> socket.socket:
    # Binding here, not in uvicorn, tells us the real port before serving when port is 0.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def _listen_unix(path: Path) -> socket.socket:
    """A listening unix socket at ``path``; a stale socket file left by a killed server is
    replaced, any other file there is an error. The file is made connectable by every user
    (0666) so a harness running as the sandbox user can reach a socket made by root."""
    if path.is_socket():
        path.unlink()
    elif path.exists():
        msg = f"{path}: exists and is not a socket; give --unix a path that is free"
        raise InvalidInput(msg)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        path.chmod(0o666)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        msg = f"{path}: cannot listen on this unix socket: {exc.strerror or exc}"
        raise InvalidInput(msg) from exc
    return sock


def _close(sockets: list[socket.socket], unix_path: Path | None) -> None:
    for sock in sockets:
        sock.close()
    if unix_path is not None and unix_path.is_socket():
        unix_path.unlink()


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    script_path: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    log_path: Path | None = None,
    unix_path: Path | None = None,
) -> None:
    """Serve ``script_path`` until interrupted, on TCP and, when ``unix_path`` is given, on a
    unix socket too (both at once, one script and one set of cursors). Prints ``scripted model
    listening on URL`` (the real port when ``port`` is 0), then ``scripted model listening on
    unix:PATH``, once the sockets accept connections.

    Raises:
        InvalidInput: the script does not load (see ``Script.load``), or the unix socket path is
            taken by another kind of file or cannot be bound.
    """
    script = Script.load(script_path)
    sockets = [_listen(host, port)]
    try:
        if unix_path is not None:
            sockets.append(_listen_unix(unix_path))
    except InvalidInput:
        _close(sockets, None)
        raise
    url = _url(sockets[0])
    logger.info("scripted model serving %s on %s", script_path, url)
    print(f"scripted model listening on {url}", flush=True)
    if unix_path is not None:
        print(f"scripted model listening on unix:{unix_path}", flush=True)
    try:
        app = create_app(script, log_path=log_path)
        _Server(_uvicorn_config(app, "info"), unix_path).run(sockets=sockets)
    finally:
        _close(sockets, unix_path)


class ScriptedModelServer:
    """A scripted model server on a free loopback port, in a background thread, for tests::

    with ScriptedModelServer(script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="test")

    With ``unix_path`` it listens on that unix socket as well (Claude Code reaches it with
    ``ANTHROPIC_UNIX_SOCKET=PATH`` and ``ANTHROPIC_BASE_URL=http://localhost``).
    """

    def __init__(
        self, script: Script, *, log_path: Path | None = None, unix_path: Path | None = None
    ) -> None:
        self._state = ServerState(script, log_path=log_path)
        self._unix_path = unix_path
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._unix_sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, for ``base_url=`` or ``ANTHROPIC_BASE_URL``."""
        if self._sock is None:
            msg = "the scripted model server is not running: use it as a context manager or call start()"
            raise ServiceUnavailable(msg)
        return _url(self._sock)

    @property
    def unix_path(self) -> Path | None:
        """The unix socket it also listens on, if it was given one."""
        return self._unix_path

    def start(self) -> Self:
        """Bind a free port (and the unix socket, if any) and serve in a daemon thread; returns
        once requests are accepted."""
        sockets = []
        if self._unix_path is not None:
            self._unix_sock = _listen_unix(self._unix_path)
            sockets.append(self._unix_sock)
        self._sock = _listen("127.0.0.1", 0)
        sockets.insert(0, self._sock)
        server = self._server = _Server(_uvicorn_config(build_app(self._state), "warning"), self._unix_path)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": sockets}, name="scripted-model", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                msg = f"the scripted model server did not start within {_START_TIMEOUT_S:g} s"
                raise ServiceUnavailable(msg)
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end; ``start()`` may be called again."""
        if self._server is not None:
            self._server.should_exit = True
            self._server = None
        if self._thread is not None:
            self._thread.join(_START_TIMEOUT_S)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._unix_sock is not None:
            _close([self._unix_sock], self._unix_path)
            self._unix_sock = None

    def requests(self, session: str | None = None) -> list[LoggedRequest]:
        """Every request received so far, oldest first (only ``session``'s when given)."""
        return self._state.requests(session)

    def reset(self, script: Script | None = None) -> None:
        """Clear the log and every session's cursor; optionally follow a new script."""
        self._state.reset(script)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
