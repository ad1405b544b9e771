"""The worker's allow-listing egress proxy: the only way out of a ``registries`` container.

It listens on a unix socket in a directory the container gets read-only (no TCP port on any
interface of the host); inside, a relay on the container's own loopback forwards to it (see
:mod:`workers.environment.relay`), and ``HTTP_PROXY``/``HTTPS_PROXY`` point there. A container at
this level has no network interface but loopback, so everything it sends goes through here.

It speaks HTTP/1.1 proxying: ``CONNECT host:port`` (TLS, tunnelled untouched) and absolute-URI
requests (plain HTTP, one per connection). Each host asked for is logged, allowed or not; a host
not on the list gets ``403`` whose body names it and the setting that would allow it, which is
what pip, npm and curl print.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
_CONNECT_TIMEOUT_S = 15.0


class EgressProxy:
    """One allow-list, served on ``socket_path`` from a thread of its own until :meth:`close`."""

    def __init__(self, socket_path: Path, allowed: list[str]) -> None:
        self.socket_path = socket_path
        self.allowed = {entry.lower() for entry in allowed}
        self.asked: deque[tuple[str, int, bool]] = deque(maxlen=1000)
        """(host, port, allowed) of the latest requests, newest last."""
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="egress-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if self._server is None:
            msg = f"the egress proxy did not start on {socket_path}"
            raise OSError(msg)

    def allows(self, host: str, port: int) -> bool:
        """A bare host on the list allows every port of it; host:port only that port."""
        host = host.lower().strip("[]")
        return host in self.allowed or f"{host}:{port}" in self.allowed

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_unix_server(self._handle, path=str(self.socket_path))
            )
            self.socket_path.chmod(0o666)  # the sandbox user (uid 1000) connects through its relay
        finally:
            ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        try:
            await self._forward(head, reader, writer)
        except (ConnectionError, OSError, TimeoutError, ValueError) as exc:
            log.debug("egress proxy connection ended: %s", exc)
        finally:
            writer.close()

    async def _forward(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = (lines[0].split(" ") + ["", "", ""])[:3]
        tunnel = method.upper() == "CONNECT"
        host, port, path = _target(target, tunnel)
        if not host:
            writer.write(_answer(400, "raas egress proxy: not a proxy request"))
            return
        allowed = self.allows(host, port)
        self.asked.append((host, port, allowed))
        log.info("egress proxy: %s %s:%d", "allowed" if allowed else "DENIED", host, port)
        if not allowed:
            body = (
                f"raas egress proxy: {host}:{port} is not on this project's allow-list; "
                'add it to [environment] registries, or use network = "full"'
            )
            writer.write(_answer(403, body))
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), _CONNECT_TIMEOUT_S)
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                kept = [line for line in lines[1:] if line and not _hop_by_hop(line)]
                up_writer.write(f"{method} {path} {version}\r\n".encode("latin-1"))
                up_writer.write(
                    "".join(f"{line}\r\n" for line in [*kept, "Connection: close"]).encode("latin-1")
                )
                up_writer.write(b"\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    def close(self) -> None:
        """Stop serving and end the connections still open."""
        with contextlib.suppress(RuntimeError, TimeoutError):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
        self.socket_path.unlink(missing_ok=True)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


def _target(target: str, tunnel: bool) -> tuple[str, int, str]:
    """(host, port, origin-form path) of a request line's target; host "" if it names none."""
    if tunnel:
        host, _, port = target.rpartition(":")
        return (host, int(port), "") if host and port.isdigit() else ("", 0, "")
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        return "", 0, ""
    path = parts.path or "/"
    return parts.hostname, parts.port or 80, f"{path}?{parts.query}" if parts.query else path


def _hop_by_hop(line: str) -> bool:
    name = line.split(":", 1)[0].strip().lower()
    return name in {"connection", "proxy-connection", "proxy-authorization", "keep-alive"}


def _answer(status: int, body: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden"}[status]
    data = body.encode() + b"\n"
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + data


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
