"""The gateway's HTTP side: one asyncio loop in a background thread serves every lease's unix
socket, so a threads worker running a hundred iterations holds one thread and one upstream
connection pool for all their model calls, not a server each.

A lease is one iteration attempt: a directory holding ``llm.sock`` (bind-mounted into the
container at :data:`CONTAINER_SOCKET_DIR`) and a token the harness sends as its API key. A
request is checked (token, method, path), its key swapped for the worker's, ``x-raas-session``
added, then it passes the :class:`~workers.gateway.gate.Gate` and goes upstream; the answer is
relayed chunk by chunk as it arrives, unchanged, while a :class:`~workers.gateway.metering.Meter`
reads its usage. Error answers (small, never streamed) are relayed with the real keys scrubbed.
One metered call per lease is in flight at a time: the ledger holds one reservation per
iteration, and a second concurrent call would share it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

import h11
import httpx

from shared.errors import InvalidInput
from shared.settings import Settings
from workers.gateway.gate import Emit, Gate, GatewayStats, Refused, Ticket
from workers.gateway.mcp_tools import MCP_PATH, McpEndpoint
from workers.gateway.metering import Api, Meter
from workers.llm.ratelimit import RateLimiter
from workers.records import Claim

log = logging.getLogger(__name__)

CONTAINER_SOCKET_DIR = "/run/raas"
SOCKET_NAME = "llm.sock"
SESSION_HEADER = "x-raas-session"
ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
MAX_BODY_BYTES = 64 * 1024 * 1024
# AF_UNIX paths are limited to 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH = 100
READ_BYTES = 65536

_ROUTES = {
    "/v1/messages": Api.MESSAGES,
    "/v1/messages/count_tokens": Api.COUNT_TOKENS,
    "/v1/responses": Api.RESPONSES,
}
# Never forwarded upstream: the harness's credentials, framing and what the gateway sets itself.
_DROPPED_REQUEST = frozenset(
    {
        "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
        "proxy-authorization", "proxy-connection", "x-api-key", "authorization", "accept-encoding",
        SESSION_HEADER,
    }
)  # fmt: skip
_DROPPED_RESPONSE = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}
)

T = TypeVar("T")


class GatewayLease:
    """One iteration attempt's socket and token; a context manager that closes itself."""

    def __init__(self, gateway: Gateway, directory: Path, token: str, gate: Gate) -> None:
        self.directory = directory
        self.token = token
        self.gate = gate
        self._gateway = gateway
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._call_lock: asyncio.Lock | None = None
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
        self._call_lock = asyncio.Lock()
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
            await _Connection(self, reader, writer).serve()
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

    def open(self, claim: Claim, emit: Emit, *, harness: str) -> GatewayLease:
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
        lease = GatewayLease(self, directory, token, gate)
        self.run(lease._start())
        log.info("gateway lease for iteration %s (%s) at %s", claim.iteration_id, harness, directory)
        return lease

    def upstream(self, api: Api) -> tuple[str, dict[str, str]]:
        """The URL prefix and credential headers of an API (the real keys live only here)."""
        s = self.settings
        if api is Api.RESPONSES:
            key = s.openai_api_key.get_secret_value() if s.openai_api_key else ""
            return (s.openai_base_url or OPENAI_URL).rstrip("/"), {"authorization": f"Bearer {key}"}
        key = s.anthropic_api_key.get_secret_value() if s.anthropic_api_key else ""
        return (s.anthropic_base_url or ANTHROPIC_URL).rstrip("/"), {"x-api-key": key}

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


class _Connection:
    """One harness connection: HTTP/1.1 requests one after another (keep-alive)."""

    def __init__(
        self, lease: GatewayLease, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.lease = lease
        self.gateway = lease._gateway
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY_BYTES)

    async def serve(self) -> None:
        while True:
            request = await self._next_request()
            if request is None:
                return
            head, body = request
            await self._handle(head, body)
            if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                return
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _next_request(self) -> tuple[h11.Request, bytes] | None:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(READ_BYTES)
                self.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY_BYTES:
                    await self._error(Api.MESSAGES, 413, "request_too_large", "the request body is too large")
                    return None
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return head, b"".join(chunks)
            else:  # ConnectionClosed, or PAUSED after a response we could not finish
                return None

    async def _handle(self, head: h11.Request, body: bytes) -> None:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
        path = urlsplit(head.target.decode("latin-1")).path
        api = _ROUTES.get(path)
        error_api = api or (Api.RESPONSES if path.startswith("/v1/responses") else Api.MESSAGES)
        if self.lease.revoked or not self._token_ok(headers):
            await self._error(error_api, 401, "authentication_error", "invalid gateway token")
            return
        if path == MCP_PATH:
            await self._mcp(head, body)
            return
        if api is None:
            await self._error(error_api, 404, "not_found_error", f"the gateway does not serve {path}")
            return
        if head.method != b"POST":
            await self._error(api, 405, "invalid_request_error", f"{path} answers POST only")
            return
        if api is Api.COUNT_TOKENS:
            await self._forward(api, head, headers, body, None)
            return
        await self._metered(api, head, headers, body)

    async def _mcp(self, head: h11.Request, body: bytes) -> None:
        """The coordination tools' MCP endpoint (:mod:`workers.gateway.mcp_tools`), token checked."""
        status, headers, data = await self.gateway.mcp.handle(
            self.lease.gate,
            head.method.decode("latin-1"),
            head.target.decode("latin-1"),
            list(head.headers),
            body,
        )
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED_RESPONSE]
        await self._send(status, [*kept, ("content-length", str(len(data)))], [data])

    def _token_ok(self, headers: dict[str, str]) -> bool:
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ").strip()
        return bool(given) and secrets.compare_digest(given.encode(), self.lease.token.encode())

    async def _metered(self, api: Api, head: h11.Request, headers: dict[str, str], body: bytes) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            await self._error(api, 400, "invalid_request_error", "the request body must be a JSON object")
            return
        if api is Api.RESPONSES and not isinstance(parsed.get("max_output_tokens"), int):
            # Bound the call, or its worst case (what the budget reserves) would be unbounded.
            parsed["max_output_tokens"] = self.lease.gate.default_max_tokens
            body = json.dumps(parsed).encode()
        assert self.lease._call_lock is not None
        async with self.lease._call_lock:
            try:
                ticket = await self._blocking(self.lease.gate.admit, api, parsed)
            except Refused as refused:
                await self._error(api, refused.status, refused.error_type, str(refused), retry=False)
                return
            await self._forward(api, head, headers, body, ticket)

    async def _forward(
        self, api: Api, head: h11.Request, headers: dict[str, str], body: bytes, ticket: Ticket | None
    ) -> None:
        """Send the call upstream and relay its answer; settle the ticket however it ends."""
        base, credentials = self.gateway.upstream(api)
        target = head.target.decode("latin-1")
        url = base + (target.removeprefix("/v1") if api is Api.RESPONSES else target)
        sent = {k: v for k, v in headers.items() if k not in _DROPPED_REQUEST}
        sent.update(credentials)
        sent["accept-encoding"] = "identity"  # metering reads the body as relayed
        sent[SESSION_HEADER] = self.lease.gate.claim.project_id
        started = time.monotonic()
        try:
            request = self.gateway.client.build_request("POST", url, headers=sent, content=body)
            response = await self.gateway.client.send(request, stream=True)
            self.lease.gate.answer_begun()
        except httpx.HTTPError as exc:
            if ticket is not None:
                await asyncio.wrap_future(
                    self.lease.gate.fail(ticket, f"upstream unreachable: {type(exc).__name__}")
                )
            await self._error(
                api, 502, "api_error", f"the gateway could not reach the model API ({type(exc).__name__})"
            )
            return
        try:
            broken = await self._relay(api, response, ticket, started)
        finally:
            await response.aclose()
            if ticket is not None:
                # Cancelled mid-call (the lease closing): give the reservation back at once
                # (nothing happens to a ticket already settled).
                self.lease.gate.fail(ticket, "the call was cut off when the iteration ended")
        if broken is not None:
            # The harness must see a broken answer as broken, not as a whole one.
            raise ConnectionError(broken)

    async def _relay(
        self, api: Api, response: httpx.Response, ticket: Ticket | None, started: float
    ) -> str | None:
        """Relay the answer and settle the ticket (if any); what broke the answer, if anything did."""
        out_headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _DROPPED_RESPONSE]
        if response.status_code >= 400:
            data = self.gateway.scrub(await response.aread())
            if ticket is not None:
                auth = response.status_code in (401, 403)
                error = f"upstream {response.status_code}: {data[:300].decode('utf-8', 'replace')}"
                await asyncio.wrap_future(self.lease.gate.fail(ticket, error, auth=auth))
            elif response.status_code in (401, 403):
                self.lease.gate.note(auth_failed=True)
            await self._send(response.status_code, [*out_headers, ("content-length", str(len(data)))], [data])
            return None
        streamed = "text/event-stream" in response.headers.get("content-type", "")
        meter = Meter(api, streamed=streamed)
        await self._start_response(response.status_code, out_headers)
        gone = cut = False
        batch = _Batch(self.h11, self.writer)
        try:
            async for chunk in response.aiter_raw():
                meter.feed(chunk)
                if not gone:
                    batch.add(chunk)
                    try:
                        await self.writer.drain()
                    except ConnectionError:
                        gone = True  # the harness hung up: read on, the tokens are spent anyway
        except httpx.HTTPError:
            cut = True
        if not gone:
            batch.flush()
        if ticket is not None:
            # Counted before the harness sees the end; read and written in the background.
            self.lease.gate.settle(ticket, meter, time.monotonic() - started)
        if cut or gone:
            return "the upstream answer was cut off" if cut else "the harness hung up"
        await self._write(h11.EndOfMessage())
        return None

    async def _blocking(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.gateway.blocking, lambda: function(*args, **kwargs))

    async def _error(
        self, api: Api, status: int, error_type: str, message: str, *, retry: bool = True
    ) -> None:
        """An error answer in the API's own format; ``retry=False`` tells SDK clients not to retry."""
        if api is Api.RESPONSES:
            payload: dict[str, Any] = {"error": {"message": message, "type": error_type, "code": error_type}}
        else:
            payload = {"type": "error", "error": {"type": error_type, "message": message}}
        data = json.dumps(payload).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
        if not retry:
            headers.append(("x-should-retry", "false"))
        await self._send(status, headers, [data])

    async def _send(self, status: int, headers: list[tuple[str, str]], chunks: list[bytes]) -> None:
        await self._start_response(status, headers)
        for chunk in chunks:
            await self._write(h11.Data(data=chunk))
        await self._write(h11.EndOfMessage())

    async def _start_response(self, status: int, headers: list[tuple[str, str]]) -> None:
        await self._write(h11.Response(status_code=status, headers=headers))

    async def _write(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()


class _Batch:
    """The answer's chunks that arrived together, relayed as one write when the relay would wait
    for more (never later): one write and one wake-up of the harness, not one per SSE event.
    The bytes are the same; only the HTTP chunking differs."""

    def __init__(self, connection: h11.Connection, writer: asyncio.StreamWriter) -> None:
        self._h11 = connection
        self._writer = writer
        self._chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        if not self._chunks:
            # Runs once the relay's task yields, i.e. has read all that had arrived.
            asyncio.get_running_loop().call_soon(self.flush)
        self._chunks.append(chunk)

    def flush(self) -> None:
        if self._chunks:
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._writer.write(self._h11.send(h11.Data(data=data)) or b"")
