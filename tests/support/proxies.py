"""Proxies that can be cut: an outage of the service behind them, made without touching it.

Cut, a proxy closes its listening socket (a connect is refused) and aborts every open
connection, hijacked ``docker exec`` streams included; restored, it listens again. The service
behind it never notices. :class:`UnixSocketProxy` stands in front of the Docker engine's socket
(the fault tests, the chaos soak), :class:`TcpProxy` in front of a loopback port (the chaos
soak's object store).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tests.support.loopback import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class CuttableProxy:
    """The forwarding, cutting and restoring; a subclass says where it listens and connects."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=type(self).__name__, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.connections = 0
        """Connections accepted so far (a test's proof that its clients go through the proxy)."""
        self._thread.start()
        self.restore()

    async def _listen(self, handler: Handler) -> asyncio.AbstractServer:
        raise NotImplementedError

    async def _connect(self) -> Streams:
        raise NotImplementedError

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def restore(self) -> None:
        self._server = self._submit(self._listen(self._handle))

    def cut(self) -> None:
        self._submit(self._cut())

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def close(self) -> None:
        self.cut()
        self._submit(self._cancel_pipes())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _cancel_pipes(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await self._connect()
        except OSError:
            writer.transport.abort()
            return
        self._open.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._open.discard(end)
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction; pass a half-close on (docker exec streams half-close stdin)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        writer.transport.abort()


class UnixSocketProxy(CuttableProxy):
    """A Unix socket at ``path`` forwarding to the one at ``upstream``."""

    def __init__(self, path: Path, upstream: str) -> None:
        self.path = path
        self.upstream = upstream
        super().__init__()

    async def _listen(self, handler: Handler) -> asyncio.AbstractServer:
        self.path.unlink(missing_ok=True)
        return await asyncio.start_unix_server(handler, path=str(self.path))

    async def _connect(self) -> Streams:
        return await asyncio.open_unix_connection(self.upstream)

    def close(self) -> None:
        super().close()
        self.path.unlink(missing_ok=True)


class TcpProxy(CuttableProxy):
    """A free loopback port (``port``) forwarding to ``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        super().__init__()

    async def _listen(self, handler: Handler) -> asyncio.AbstractServer:
        return await asyncio.start_server(handler, "127.0.0.1", self.port)

    async def _connect(self) -> Streams:
        return await asyncio.open_connection("127.0.0.1", self.upstream_port)
