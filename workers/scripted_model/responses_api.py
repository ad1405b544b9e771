"""Turning a scripted step into what OpenAI's Responses API (``POST /v1/responses``, the API
Codex speaks) puts on the wire: a JSON Response, or the server-sent events that stream it.

The same script serves both APIs: a text block becomes a ``message`` output item with one
``output_text`` part, a tool_use block a ``function_call`` item whose ``arguments`` are the
block's input as a JSON string (Codex's shell tool is the function ``exec_command`` with
``{"cmd": "..."}``), and a tool_use block whose input is a string a ``custom_tool_call`` (a
freeform tool: Codex's ``apply_patch`` takes the patch text). As in ``sse.py`` the stream is
built from the finished Response, so the two forms of one step cannot disagree:
``response.created`` and ``response.in_progress``, then per item ``response.output_item.added``,
its deltas (``response.output_text.delta`` a few words each, ``…function_call_arguments.delta``
cut mid-token, ``…custom_tool_call_input.delta``) and ``…done`` events, and
``response.completed`` with the usage.

Usage is translated, not copied: the Responses API counts cached tokens inside
``input_tokens`` (``input_tokens_details.cached_tokens`` is the part read from the cache), where
the Messages API counts them apart. So ``input_tokens`` = the step's input + cache writes + cache
reads, and ``cached_tokens`` = its cache reads.
"""

from __future__ import annotations

import json
import time
from typing import Any

from workers.scripted_model.script import ErrorSpec, MessageStep, TextBlock
from workers.scripted_model.sse import (
    JSONObject,
    SSEEvent,
    estimate_tokens,
    json_chunks,
    new_id,
    text_chunks,
)

_PROMPT_KEYS = ("instructions", "input", "tools")
# The status code and the OpenAI error ``type``/``code`` for each Anthropic error type a script
# may name, so one error step reads naturally to either client.
_OPENAI_ERRORS: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "billing_error": ("insufficient_quota", "insufficient_quota"),
    "permission_error": ("invalid_request_error", "unsupported_country_region_territory"),
    "not_found_error": ("invalid_request_error", "model_not_found"),
    "request_too_large": ("invalid_request_error", "context_length_exceeded"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "timeout_error": ("server_error", "timeout"),
    "api_error": ("server_error", "server_error"),
    "overloaded_error": ("server_error", "server_is_overloaded"),
}


def prompt_tokens(request: JSONObject) -> int:
    """Estimated input tokens of a Responses request: its instructions, input and tools."""
    return estimate_tokens({key: request[key] for key in _PROMPT_KEYS if key in request})


def build_response(step: MessageStep, request: JSONObject) -> JSONObject:
    """The completed Response a step answers ``request`` with; counts the step leaves out are
    estimated as for the Messages API."""
    output: list[JSONObject] = []
    output_text: list[str] = []
    for block in step.content:
        if isinstance(block, TextBlock):
            part = {"type": "output_text", "text": block.text, "annotations": [], "logprobs": []}
            output.append({
                "id": new_id("msg"), "type": "message", "status": "completed", "role": "assistant",
                "content": [part],
            })  # fmt: skip
            output_text.append(block.text)
        elif isinstance(block.input, str):
            output.append({
                "id": new_id("ctc"), "type": "custom_tool_call", "status": "completed",
                "call_id": block.id or new_id("call"), "name": block.name, "input": block.input,
            })  # fmt: skip
            output_text.append(block.input)
        else:
            arguments = json.dumps(block.input)
            output.append({
                "id": new_id("fc"), "type": "function_call", "status": "completed",
                "call_id": block.id or new_id("call"), "name": block.name, "arguments": arguments,
            })  # fmt: skip
            output_text.append(arguments)
    usage = step.usage
    fields = usage.model_fields_set
    fresh = usage.input_tokens if "input_tokens" in fields else prompt_tokens(request)
    cached = usage.cache_read_input_tokens
    input_tokens = fresh + usage.cache_creation_input_tokens + cached
    output_tokens = (
        usage.output_tokens if "output_tokens" in fields else estimate_tokens("".join(output_text))
    )
    return {
        **_envelope(request, "completed"),
        "output": output,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _envelope(request: JSONObject, status: str) -> JSONObject:
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": request.get("model", "gpt-scripted"),
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "usage": None,
    }


def response_events(response: JSONObject, *, words_per_chunk: int, chars_per_chunk: int) -> list[SSEEvent]:
    """The full event sequence that streams ``response`` (as built by ``build_response``)."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
    ]
    for index, item in enumerate(response["output"]):
        events.extend(_item_events(index, item, words_per_chunk, chars_per_chunk))
    events.append(("response.completed", {"response": response}))
    return _numbered(events)


def _item_events(index: int, item: JSONObject, words: int, chars: int) -> list[tuple[str, dict[str, Any]]]:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        text = item["content"][0]["text"]
        empty_part = {**item["content"][0], "text": ""}
        part_at = {**where, "content_index": 0}
        body = [
            ("response.content_part.added", {**part_at, "part": empty_part}),
            *[
                ("response.output_text.delta", {**part_at, "delta": piece, "logprobs": []})
                for piece in text_chunks(text, words)
            ],
            ("response.output_text.done", {**part_at, "text": text, "logprobs": []}),
            ("response.content_part.done", {**part_at, "part": item["content"][0]}),
        ]
        started = {**item, "status": "in_progress", "content": []}
    elif item["type"] == "custom_tool_call":
        body = [
            ("response.custom_tool_call_input.delta", {**where, "delta": piece})
            for piece in text_chunks(item["input"], words)
        ]
        body.append(("response.custom_tool_call_input.done", {**where, "input": item["input"]}))
        started = {**item, "status": "in_progress", "input": ""}
    else:
        arguments = json.loads(item["arguments"])
        body = [
            ("response.function_call_arguments.delta", {**where, "delta": piece})
            for piece in json_chunks(arguments, chars)[1:]
        ]
        body.append(("response.function_call_arguments.done", {**where, "arguments": item["arguments"]}))
        started = {**item, "status": "in_progress", "arguments": ""}
    return [
        ("response.output_item.added", {"output_index": index, "item": started}),
        *body,
        ("response.output_item.done", {"output_index": index, "item": item}),
    ]


def _numbered(events: list[tuple[str, dict[str, Any]]]) -> list[SSEEvent]:
    # Every Responses event carries its type and a sequence number, in this order.
    return [
        (name, {"type": name, "sequence_number": number, **data})
        for number, (name, data) in enumerate(events)
    ]


def failed_events(
    error: ErrorSpec, partial_text: str, request: JSONObject, *, words_per_chunk: int
) -> list[SSEEvent]:
    """A stream that starts a message, sends ``partial_text``, then ``response.failed`` with the
    error (what the API sends when it fails after the 200)."""
    step = MessageStep(content=[TextBlock(type="text", text=partial_text)])
    response = build_response(step, request)
    events = response_events(response, words_per_chunk=words_per_chunk, chars_per_chunk=1)
    cut = next(i for i, (name, _) in enumerate(events) if name == "response.output_text.done")
    error_type, code = _OPENAI_ERRORS[error.error_type]
    failed = {
        **response,
        "status": "failed",
        "output": [],
        "error": {"code": code or error_type, "message": error.error_message},
    }
    return [
        *events[:cut],
        ("response.failed", {"type": "response.failed", "sequence_number": cut, "response": failed}),
    ]


def error_body(error_type: str, message: str) -> JSONObject:
    """The body of an OpenAI API error for an Anthropic error type (``sse.error_body``'s twin)."""
    openai_type, code = _OPENAI_ERRORS.get(error_type, ("server_error", None))
    return {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
