"""The scripted model server: the Anthropic Messages API and OpenAI's Responses API, answered
from a script.

It is the one fake in the system and sits at the network edge, so the real ``anthropic`` SDK is
exercised end to end (retries, SSE parsing, error classes) by tests, benchmarks and the offline
demo. Routes only parse, pick the step and format; what a step means lives in ``script.py`` and
how it looks on the wire in ``sse.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from shared.errors import InvalidInput, ServiceUnavailable
from workers.scripted_model import responses_api, sse
from workers.scripted_model.script import (
    ErrorSpec,
    ErrorStep,
    MessageStep,
    ReplayStep,
    Script,
    Step,
    TextBlock,
)
from workers.scripted_model.sessions import TITLE, is_title_request, session_key
from workers.scripted_model.state import LoggedRequest, ServerState, now, redact

logger = logging.getLogger(__name__)

Api = Literal["messages", "responses"]
_REQUIRED_KEYS: dict[Api, tuple[str, ...]] = {
    "messages": ("model", "messages", "max_tokens"),
    "responses": ("model", "input"),
}
_TITLE_STEP = MessageStep(content=[TextBlock(type="text", text=TITLE)])
_START_TIMEOUT_S = 10.0


def create_app(script: Script, *, log_path: Path | None = None) -> FastAPI:
    """An ASGI app answering ``POST /v1/messages`` (Anthropic) and ``POST /v1/responses``
    (OpenAI) from ``script``, with its request log at ``/_scripted/requests``; ``log_path`` also
    appends each request to a JSON-lines file."""
    return _build_app(ServerState(script, log_path=log_path))


def _build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="scripted model", docs_url=None, redoc_url=None, openapi_url=None)

    async def scripted_turn(request: Request, api: Api) -> Response:
        body, problem = await _read_json(request, _REQUIRED_KEYS[api])
        session = session_key(request.headers, body)
        if problem is not None:
            state.record(_entry(request, session, body))
            return _error_response(api, 400, "invalid_request_error", problem)
        if api == "messages" and is_title_request(body):
            # OpenCode's title side-request: answered, but it is not one of the script's turns.
            state.record(_entry(request, session, body, side_request="title"))
            logger.info(
                "scripted model: title side-request of session %s answered outside the script", session
            )
            return _answer(api, state.script, _TITLE_STEP, body)
        turn, picked = state.take_turn(session)
        state.record(_entry(request, session, body, turn=turn, step=picked[0] if picked else None))
        if picked is None:
            return _exhausted_response(api, state.script, session)
        step = picked[1]
        await asyncio.sleep(step.latency_s)
        return _answer(api, state.script, step, body)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await scripted_turn(request, "messages")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await scripted_turn(request, "responses")

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        body, _ = await _read_json(request, ())
        state.record(_entry(request, session_key(request.headers, body), body))
        tokens = sse.prompt_tokens(body) if isinstance(body, dict) else 1
        return JSONResponse({"input_tokens": tokens}, headers=_request_id())

    @app.get("/_scripted/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "steps": len(state.script.responses), "sessions": state.turns()}

    @app.get("/_scripted/requests")
    async def requests(session: str | None = None) -> list[dict[str, Any]]:
        return [entry.model_dump(mode="json") for entry in state.requests(session)]

    @app.post("/_scripted/reset")
    async def reset() -> dict[str, str]:
        state.reset()
        return {"status": "reset"}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(request: Request, path: str) -> Response:
        body, _ = await _read_json(request, ())
        state.record(_entry(request, session_key(request.headers, body), body))
        return _error_response(
            "messages", 404, "not_found_error", f"scripted model: no route {request.method} /{path}"
        )

    return app


async def _read_json(request: Request, required: tuple[str, ...]) -> tuple[Any, str | None]:
    # Problems are reported the way the real API would (400 invalid_request_error), and the
    # request is still logged, so a test sees exactly what its client sent.
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", errors="replace"), "the request body is not valid JSON"
    if not isinstance(body, dict):
        return body, "the request body must be a JSON object"
    missing = [key for key in required if key not in body]
    return body, f"{missing[0]}: Field required" if missing else None


def _entry(
    request: Request,
    session: str,
    body: Any,
    *,
    turn: int | None = None,
    step: int | None = None,
    side_request: str | None = None,
) -> LoggedRequest:
    return LoggedRequest(
        time=now(),
        session=session,
        turn=turn,
        step=step,
        side_request=side_request,
        method=request.method,
        path=request.url.path,
        headers=redact(dict(request.headers)),
        body=body,
    )


def _answer(api: Api, script: Script, step: Step, body: dict[str, Any]) -> Response:
    stream = body.get("stream") is True
    words, chars = script.text_chunk_words, script.json_chunk_chars
    if isinstance(step, MessageStep):
        events: list[sse.SSEEvent]
        if api == "responses":
            answer = responses_api.build_response(step, body)
            events = responses_api.response_events(answer, words_per_chunk=words, chars_per_chunk=chars)
        else:
            answer = sse.build_message(step, body)
            events = sse.message_events(answer, words_per_chunk=words, chars_per_chunk=chars)
        if not stream:
            return JSONResponse(answer, headers=_request_id())
        return _sse_response([sse.encode_event(*event) for event in events], step.delta_delay_s)
    if isinstance(step, ErrorStep):
        if not (step.mid_stream and stream):
            return _spec_error_response(api, step.error)
        if api == "responses":
            events = responses_api.failed_events(step.error, step.partial_text, body, words_per_chunk=words)
        else:
            events = sse.mid_stream_error_events(step.error, step.partial_text, body, words_per_chunk=words)
        return _sse_response([sse.encode_event(*event) for event in events], step.delta_delay_s)
    return _replay(api, script, step, stream=stream)


def _replay(api: Api, script: Script, step: ReplayStep, *, stream: bool) -> Response:
    if not stream:
        msg = f"scripted model: replay step {step.replay!r} answers only requests with stream=true"
        return _error_response(api, 400, "invalid_request_error", msg)
    path = script.replay_path(step)
    try:
        recorded = path.read_bytes()
    except OSError as exc:
        msg = f"scripted model: cannot read replayed stream {path}: {exc.strerror or exc}"
        return _error_response(api, 500, "api_error", msg, should_retry=False)
    return _sse_response(sse.split_events(recorded), step.delta_delay_s)


def _sse_response(pieces: list[bytes], delay_s: float) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for index, piece in enumerate(pieces):
            if index and delay_s:
                await asyncio.sleep(delay_s)
            yield piece

    headers = {**_request_id(), "cache-control": "no-cache"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def _spec_error_response(api: Api, error: ErrorSpec) -> JSONResponse:
    response = _error_response(api, error.http_status, error.error_type, error.error_message)
    if error.retry_after_s is not None:
        response.headers["retry-after"] = f"{error.retry_after_s:g}"
    return response


def _exhausted_response(api: Api, script: Script, session: str) -> JSONResponse:
    msg = (
        f"scripted model: the script is exhausted: session {session!r} has had all "
        f"{script.length} scripted responses (when_exhausted is 'error')"
    )
    # Retrying cannot help, so the SDK is told not to (it would otherwise retry a 500 twice).
    return _error_response(api, 500, "api_error", msg, should_retry=False)


def _error_response(
    api: Api, status: int, error_type: str, message: str, *, should_retry: bool | None = None
) -> JSONResponse:
    headers = _request_id()
    if should_retry is not None:
        headers["x-should-retry"] = "true" if should_retry else "false"
    if api == "responses":
        body = responses_api.error_body(error_type, message)
    else:
        body = sse.error_body(error_type, message)
    return JSONResponse(body, status_code=status, headers=headers)


def _request_id() -> dict[str, str]:
    return {"request-id": sse.new_id("req")}


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
        server = self._server = _Server(_uvicorn_config(_build_app(self._state), "warning"), self._unix_path)
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
