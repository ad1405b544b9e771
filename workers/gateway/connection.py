"""One harness connection to a lease's socket: HTTP/1.1 requests one after another, each checked
(token, path, method), its key swapped for the worker's, ``x-raas-session`` added, passed through
the :class:`~workers.gateway.gate.Gate`, sent upstream, and its answer relayed chunk by chunk as
it arrives, unchanged, while a :class:`~workers.gateway.metering.Meter` reads its usage. Error
answers (small, never streamed) are relayed with the real keys scrubbed.

A lease answers only its harness's endpoints (:func:`served`): the Messages API and its
``count_tokens`` for Claude Code and OpenCode, the Responses API for Codex; any other path is a
404. ``count_tokens`` is free upstream but passes the rate limits and is counted. One metered
call per lease is in flight at a time, so the ledger decides each with the one before settled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from concurrent.futures import Executor
from typing import Any, Protocol
from urllib.parse import urlsplit

import h11
import httpx

from shared.harnesses import HARNESSES
from workers.gateway.gate import Gate, Refused, Ticket
from workers.gateway.mcp_tools import MCP_PATH, McpEndpoint
from workers.gateway.metering import Api, Meter
from workers.ledger import Count
from workers.llm.client import SESSION_HEADER

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
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


def served(harness: str) -> frozenset[Api]:
    """The endpoints a lease of ``harness`` answers: its CLI's API, nothing else."""
    known = HARNESSES.get(harness)
    if known is not None and known.api == "responses":
        return frozenset({Api.RESPONSES})
    return frozenset({Api.MESSAGES, Api.COUNT_TOKENS})


class Upstream(Protocol):
    """What a connection needs of the process's gateway (:class:`workers.gateway.server.Gateway`)."""

    @property
    def client(self) -> httpx.AsyncClient: ...

    @property
    def blocking(self) -> Executor: ...

    @property
    def mcp(self) -> McpEndpoint: ...

    def count_tokens(self, headers: dict[str, str], request: dict[str, Any]) -> int | None: ...

    def upstream(self, api: Api) -> tuple[str, dict[str, str]]: ...

    def scrub(self, data: bytes) -> bytes: ...


class Lease(Protocol):
    """What a connection needs of its lease (:class:`workers.gateway.server.GatewayLease`)."""

    token: str
    gate: Gate
    harness: str
    apis: frozenset[Api]
    revoked: bool
    call_lock: asyncio.Lock


class Connection:
    """One harness connection: HTTP/1.1 requests one after another (keep-alive)."""

    def __init__(
        self, gateway: Upstream, lease: Lease, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.lease = lease
        self.gateway = gateway
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
        if api is None or api not in self.lease.apis:
            log.info(
                "iteration %s: %s asked for %s, refused",
                self.lease.gate.claim.iteration_id,
                self.lease.harness,
                path,
            )
            msg = f"the gateway does not serve {path} to {self.lease.harness}"
            await self._error(error_api, 404, "not_found_error", msg)
            return
        if head.method != b"POST":
            await self._error(api, 405, "invalid_request_error", f"{path} answers POST only")
            return
        if api is Api.COUNT_TOKENS:
            await self._count_tokens(head, headers, body)
            return
        await self._metered(api, head, headers, body)

    async def _count_tokens(self, head: h11.Request, headers: dict[str, str], body: bytes) -> None:
        """A harness's own token count: free upstream, but through the rate limits, and counted."""
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        try:
            admission = await self._blocking(
                self.lease.gate.admit_count, parsed if isinstance(parsed, dict) else {}
            )
        except Refused as refused:
            await self._error(Api.COUNT_TOKENS, refused.status, refused.error_type, str(refused), retry=False)
            return
        counted = await self._forward(Api.COUNT_TOKENS, head, headers, body, None)
        self.lease.gate.counted(admission, counted)

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
        count = self._counter(headers, parsed) if api is Api.MESSAGES else None
        async with self.lease.call_lock:
            try:
                ticket = await self._blocking(self.lease.gate.admit, api, parsed, len(body), count)
            except Refused as refused:
                await self._error(api, refused.status, refused.error_type, str(refused), retry=False)
                return
            if ticket.call.lowered:
                # The budget pays no more: the call asks for what its reservation covers.
                parsed[_OUTPUT_LIMIT[api]] = ticket.max_output_tokens
                body = json.dumps(parsed).encode()
            await self._forward(api, head, headers, body, ticket)

    def _counter(self, headers: dict[str, str], parsed: dict[str, Any]) -> Count:
        """Asks upstream's ``count_tokens`` for the call's input tokens (from the ledger's thread):
        the provider's count sizes a call near the budget's end."""
        keys = ("model", "system", "messages", "tools", "tool_choice", "thinking")
        request = {key: parsed[key] for key in keys if key in parsed}
        sent = {k: v for k, v in headers.items() if k not in _DROPPED_REQUEST}
        sent[SESSION_HEADER] = self.lease.gate.claim.project_id  # as the call's own, see _forward
        return lambda: self.gateway.count_tokens(sent, request)

    async def _forward(
        self, api: Api, head: h11.Request, headers: dict[str, str], body: bytes, ticket: Ticket | None
    ) -> int | None:
        """Send the call upstream and relay its answer; settle the ticket however it ends. The
        input tokens a ``count_tokens`` answer gave (None for the others, or if it gave none)."""
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
            return None
        if api is Api.COUNT_TOKENS:
            return await self._relay_count(response)
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
        return None

    async def _relay_count(self, response: httpx.Response) -> int | None:
        """Relay a (small, never streamed) ``count_tokens`` answer; the count it gave."""
        try:
            data = self.gateway.scrub(await response.aread())
        finally:
            await response.aclose()
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _DROPPED_RESPONSE]
        await self._send(response.status_code, [*headers, ("content-length", str(len(data)))], [data])
        try:
            tokens = json.loads(data).get("input_tokens") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            return None
        return tokens if isinstance(tokens, int) else None

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


_OUTPUT_LIMIT = {Api.MESSAGES: "max_tokens", Api.RESPONSES: "max_output_tokens"}
