"""Turning a scripted step into what the Messages API puts on the wire: a JSON Message, or the
sequence of server-sent events that streams it.

The stream is built from the finished Message, so the JSON and the streamed forms of one step
cannot disagree. Event shapes follow the recorded streams in ``tests/fixtures/anthropic-streams``:
``message_start`` carries the input-side usage, a ``ping`` follows the first block start, text
arrives a few words per ``text_delta``, tool input as ``input_json_delta`` partials cut at fixed
character counts (so mid-token, as the real API does), and ``message_delta`` carries the stop
reason and the final cumulative usage.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import string
from typing import Any

from shared.usage import Usage
from workers.scripted_model.script import ErrorSpec, MessageStep, TextBlock

JSONObject = dict[str, Any]
SSEEvent = tuple[str, JSONObject]

_ID_ALPHABET = string.ascii_letters + string.digits
_CHARS_PER_TOKEN = 4
_WORD = re.compile(r"\s*\S+")


def new_id(prefix: str) -> str:
    """An id shaped like the real API's (``msg_01…``, ``toolu_01…``, ``req_01…``)."""
    return f"{prefix}_01" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))


def estimate_tokens(value: Any) -> int:
    """About four characters of compact JSON (or text) per token, at least one."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))


def prompt_tokens(request: JSONObject) -> int:
    """Estimated input tokens of a request: its system prompt, messages and tool definitions."""
    prompt = {key: request[key] for key in ("system", "messages", "tools") if key in request}
    return estimate_tokens(prompt)


def text_chunks(text: str, words_per_chunk: int) -> list[str]:
    """Split text into deltas of ``words_per_chunk`` words, each word with its leading space,
    as the real API sends them (``"Hello"``, ``" there"``); the pieces join back to ``text``."""
    words = _WORD.findall(text)
    tail = text[sum(map(len, words)) :]
    if tail:
        words.append(tail)
    return ["".join(words[i : i + words_per_chunk]) for i in range(0, len(words), words_per_chunk)]


def json_chunks(value: JSONObject, chars_per_chunk: int) -> list[str]:
    """Tool input as the real API streams it: an empty partial first, then fixed-size slices of
    the JSON text that cut through keys and strings."""
    text = json.dumps(value)
    return [""] + [text[i : i + chars_per_chunk] for i in range(0, len(text), chars_per_chunk)]


def build_message(step: MessageStep, request: JSONObject) -> JSONObject:
    """The Message a step answers ``request`` with; usage fields the step leaves out are
    estimated from the request and the content (see ``estimate_tokens``)."""
    content: list[JSONObject] = []
    output_chars: list[str] = []
    for block in step.content:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
            output_chars.append(block.text)
        else:
            tool_id = block.id or new_id("toolu")
            tool_input = {"input": block.input} if isinstance(block.input, str) else block.input
            content.append({"type": "tool_use", "id": tool_id, "name": block.name, "input": tool_input})
            output_chars.append(json.dumps(tool_input))
    usage = step.usage
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude-scripted"),
        "content": content,
        "stop_reason": step.effective_stop_reason,
        "stop_sequence": step.stop_sequence,
        "usage": {
            "input_tokens": _given(usage, "input_tokens", prompt_tokens(request)),
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "output_tokens": _given(usage, "output_tokens", estimate_tokens("".join(output_chars))),
        },
    }


def _given(usage: Usage, field: str, estimate: int) -> int:
    """The count the script gives, or the estimate when it leaves the count out."""
    given: int = getattr(usage, field)
    return given if field in usage.model_fields_set else estimate


def message_events(message: JSONObject, *, words_per_chunk: int, chars_per_chunk: int) -> list[SSEEvent]:
    """The full event sequence that streams ``message`` (as built by ``build_message``)."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[SSEEvent] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block, words_per_chunk, chars_per_chunk))
        if index == 0:
            events.insert(2, ("ping", {"type": "ping"}))
    if not message["content"]:
        events.append(("ping", {"type": "ping"}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: JSONObject, words: int, chars: int) -> list[SSEEvent]:
    if block["type"] == "text":
        start: JSONObject = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in text_chunks(block["text"], words)]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in json_chunks(block["input"], chars)
        ]
    events: list[SSEEvent] = [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    ]
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        for delta in deltas
    ]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def mid_stream_error_events(
    error: ErrorSpec, partial_text: str, request: JSONObject, *, words_per_chunk: int
) -> list[SSEEvent]:
    """A stream that starts a text message, sends ``partial_text``, then an ``error`` event and
    nothing more, as the real API does when it fails after the 200."""
    step = MessageStep(content=[TextBlock(type="text", text=partial_text)])
    events = message_events(build_message(step, request), words_per_chunk=words_per_chunk, chars_per_chunk=1)
    cut = next(i for i, (name, _) in enumerate(events) if name == "content_block_stop")
    return [*events[:cut], ("error", error_body(error.error_type, error.error_message))]


def error_body(error_type: str, message: str) -> JSONObject:
    """The body of every Anthropic API error, in a response or in an ``error`` event."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def encode_event(name: str, data: JSONObject) -> bytes:
    """One SSE event on the wire: ``event:`` and ``data:`` lines and a blank line."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def split_events(body: bytes) -> list[bytes]:
    """Cut a recorded SSE body after each blank line; the pieces join back to ``body`` exactly."""
    pieces = re.split(rb"(?<=\n\n)", body)
    return [piece for piece in pieces if piece]
