"""The scripted model's ASGI app: the Anthropic Messages API and OpenAI's Responses API, answered
from a script, with the request log under ``/_scripted/``.

Routes only parse, pick the step and format; what a step means lives in ``script.py`` and how it
looks on the wire in ``sse.py`` and ``responses_api.py``. Serving the app (sockets, a thread) is
``server.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

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


def create_app(script: Script, *, log_path: Path | None = None) -> FastAPI:
    """An ASGI app answering ``POST /v1/messages`` (Anthropic) and ``POST /v1/responses``
    (OpenAI) from ``script``, with its request log at ``/_scripted/requests``; ``log_path`` also
    appends each request to a JSON-lines file."""
    return build_app(ServerState(script, log_path=log_path))


def build_app(state: ServerState) -> FastAPI:
    """The app over ``state`` (its script, cursors and request log), which the caller may keep."""
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
        turn = state.take_turn(session, body)
        picked = turn.picked
        variant = turn.variant.name if turn.variant is not None else None
        step_index = picked[0] if picked else None
        state.record(_entry(request, session, body, turn=turn.number, step=step_index, variant=variant))
        if picked is None:
            return _exhausted_response(api, turn.length, session)
        index, step = picked
        await _gathered(state, (turn.walk_key, index), step)
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

    _control_routes(app, state)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(request: Request, path: str) -> Response:
        body, _ = await _read_json(request, ())
        state.record(_entry(request, session_key(request.headers, body), body))
        return _error_response(
            "messages", 404, "not_found_error", f"scripted model: no route {request.method} /{path}"
        )

    return app


def _control_routes(app: FastAPI, state: ServerState) -> None:
    """The test's side of the server, under ``/_scripted/``: health, the log, release, reset."""

    @app.get("/_scripted/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "steps": len(state.script.responses), "sessions": state.turns()}

    @app.get("/_scripted/requests")
    async def requests(session: str | None = None) -> list[dict[str, Any]]:
        return [entry.model_dump(mode="json") for entry in state.requests(session)]

    @app.post("/_scripted/release")
    async def release() -> dict[str, Any]:
        state.release()
        return {"status": "released"}

    @app.post("/_scripted/reset")
    async def reset() -> dict[str, str]:
        state.reset()
        return {"status": "reset"}


async def _gathered(state: ServerState, index: tuple[str, int], step: Step) -> None:
    """Hold until ``step.gather`` requests have reached step ``index`` (of the script's own steps
    or a variant's) and, with ``step.hold``, until ``POST /_scripted/release``; at most
    ``step.gather_timeout_s`` in all."""
    if step.gather <= 1 and not step.hold:
        return
    state.arrive(index)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + step.gather_timeout_s
    while state.arrived(index) < step.gather or (step.hold and not state.released):
        if loop.time() >= deadline:
            logger.warning(
                "scripted model: step %s%d answered with %d of %d gathered (%s)",
                f"{index[0]}:" if index[0] else "",
                index[1],
                state.arrived(index),
                step.gather,
                "released" if state.released or not step.hold else "not released",
            )
            return
        await asyncio.sleep(0.05)


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
    variant: str | None = None,
    side_request: str | None = None,
) -> LoggedRequest:
    return LoggedRequest(
        time=now(),
        session=session,
        turn=turn,
        step=step,
        variant=variant,
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


def _exhausted_response(api: Api, length: int, session: str) -> JSONResponse:
    msg = (
        f"scripted model: the script is exhausted: session {session!r} has had all "
        f"{length} scripted responses (when_exhausted is 'error')"
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
