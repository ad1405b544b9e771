"""The gateway's HTTP side: one asyncio loop in a background thread serves every lease's unix
socket, so a threads worker running a hundred iterations holds one thread and one upstream
connection pool for all their model calls, not a server each.

A lease is one iteration attempt: a directory holding ``llm.sock`` (bind-mounted into the
container at :data:`CONTAINER_SOCKET_DIR`) and a token the harness sends as its API key; each
connection to it is a :class:`~workers.gateway.connection.Connection`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import shutil
import tempfile
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import h11
import httpx

from shared.errors import InvalidInput
from shared.settings import Settings
from workers.claim import Claim
from workers.gateway.connection import Connection, served
from workers.gateway.gate import Emit, Gate, GatewayStats
from workers.gateway.mcp_tools import McpEndpoint
from workers.gateway.metering import Api
from workers.llm.ratelimit import RateLimiter

log = logging.getLogger(__name__)

CONTAINER_SOCKET_DIR = "/run/raas"
SOCKET_NAME = "llm.sock"
ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
# AF_UNIX paths are limited to 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH = 100
# How long a count of a request's input tokens, asked near the budget's end, may take.
COUNT_TIMEOUT_S = 30.0

T = TypeVar("T")


class GatewayLease:
    """One iteration attempt's socket and token; a context manager that closes itself."""

    def __init__(self, gateway: Gateway, directory: Path, token: str, gate: Gate, harness: str) -> None:
        self.directory = directory
        self.token = token
        self.gate = gate
        self.harness = harness
        self.apis = served(harness)
        self._gateway = gateway
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.call_lock = asyncio.Lock()  # one metered call at a time (made on the gateway's loop)
        self.revoked = False

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    def stats(self) -> GatewayStats:
        return self.gate.stats()

    def close(self) -> None:
        """Revoke the token (later requests get 401), stop serving, wait until every answered
        call is recorded, remove the directory."""
        if self.revoked:
            return
        self.revoked = True
        self._gateway.run(self._shutdown())
        self.gate.wait_written()  # the iteration's end must find every call recorded and settled
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path))
        self.socket_path.chmod(0o666)  # the container's uid connects; the token is the lock

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self._gateway, self, reader, writer).serve()
        except (ConnectionError, asyncio.IncompleteReadError, h11.ProtocolError) as exc:
            log.debug("gateway connection ended: %s", exc)
        except asyncio.CancelledError:
            log.debug("gateway connection closed with its lease")  # its task ends here, quietly
        finally:
            self._connections.discard(task)
            writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Gateway:
    """The worker process's LLM gateway: one event loop thread serving every lease's socket.

    Thread-safe: iterations in a threads pool open and close leases concurrently.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        limiter: RateLimiter | None,
        publish: Any | None = None,
        root: Path | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter
        self.publish = publish
        self._own_root = root is None and settings.gateway_dir is None
        base = root or settings.gateway_dir
        if base is None:
            base = Path(tempfile.mkdtemp(prefix="raas-gw-"))
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        self.root = base
        self._keys = [
            key.get_secret_value()
            for key in (settings.anthropic_api_key, settings.openai_api_key)
            if key is not None and key.get_secret_value()
        ]
        self.blocking = concurrent.futures.ThreadPoolExecutor(
            max_workers=64, thread_name_prefix="gateway-call"
        )
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="llm-gateway", daemon=True)
        self._thread.start()
        self.client: httpx.AsyncClient = self.run(_make_client())
        self.mcp = McpEndpoint(
            self.blocking, publish
        )  # the memory and message tools, at /mcp on every lease's socket
        self.run(self.mcp.start())
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the gateway's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def open(self, claim: Claim, emit: Emit) -> GatewayLease:
        """A lease for one iteration attempt: its socket directory and token, serving at once.

        Raises:
            InvalidInput: the socket's path would be too long for a unix socket.
        """
        directory = self.root / secrets.token_hex(8)
        if len(str(directory / SOCKET_NAME)) > MAX_SOCKET_PATH:
            msg = f"RAAS_GATEWAY_DIR: {self.root} is too long for a unix socket path; choose a shorter one"
            raise InvalidInput(msg)
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
        token = f"raas-gw-{secrets.token_urlsafe(32)}"
        max_turns = claim.config.harness_config_for(claim.category).max_turns
        gate = Gate(
            claim, emit, self.limiter, claim.config.max_tokens, max_turns, pool=self.blocking, loop=self.loop
        )
        harness = claim.config.harness_for(claim.category)
        lease = self.run(self._lease(directory, token, gate, harness))
        log.info("gateway lease for iteration %s at %s", claim.iteration_id, directory)
        return lease

    async def _lease(self, directory: Path, token: str, gate: Gate, harness: str) -> GatewayLease:
        lease = GatewayLease(self, directory, token, gate, harness)  # on the loop: its lock is
        await lease._start()
        return lease

    def upstream(self, api: Api) -> tuple[str, dict[str, str]]:
        """The URL prefix and credential headers of an API (the real keys live only here)."""
        s = self.settings
        if api is Api.RESPONSES:
            key = s.openai_api_key.get_secret_value() if s.openai_api_key else ""
            return (s.openai_base_url or OPENAI_URL).rstrip("/"), {"authorization": f"Bearer {key}"}
        key = s.anthropic_api_key.get_secret_value() if s.anthropic_api_key else ""
        return (s.anthropic_base_url or ANTHROPIC_URL).rstrip("/"), {"x-api-key": key}

    def count_tokens(self, headers: dict[str, str], request: dict[str, Any]) -> int | None:
        """Upstream's count of a Messages request's input tokens (free), from a thread off the
        loop; None when it gives none in :data:`COUNT_TIMEOUT_S`."""
        future = asyncio.run_coroutine_threadsafe(self._count(headers, request), self.loop)
        try:
            return future.result(COUNT_TIMEOUT_S)
        except Exception:
            log.info("a token count upstream failed", exc_info=True)
            future.cancel()
            return None

    async def _count(self, headers: dict[str, str], request: dict[str, Any]) -> int | None:
        base, credentials = self.upstream(Api.COUNT_TOKENS)
        url = f"{base}/v1/messages/count_tokens"
        response = await self.client.post(url, headers={**headers, **credentials}, json=request)
        tokens = response.json().get("input_tokens") if response.status_code == 200 else None
        return tokens if isinstance(tokens, int) else None

    def scrub(self, data: bytes) -> bytes:
        """``data`` with every real key replaced: upstream error bodies may echo a credential."""
        for key in self._keys:
            data = data.replace(key.encode(), b"[redacted]")
        return data

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.run(self.mcp.stop())
        self.run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        self.blocking.shutdown(wait=False)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


async def _make_client() -> httpx.AsyncClient:
    timeout = httpx.Timeout(600.0, connect=10.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
    return httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False)
