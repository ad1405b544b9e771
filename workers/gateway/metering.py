"""Reading what a model call used from the response itself, as the gateway relays it.

A harness's own cost figure is never the ledger (DESIGN.md rule 9): Claude Code's
``total_cost_usd`` is its list-price guess and its stream-json shows the ``message_start`` count,
Codex reports no cost at all. The gateway sees every byte of the answer, so it reads the usage
there: Anthropic's SSE from ``message_start.message.usage`` updated by ``message_delta.usage``
(cache counts included, through :class:`workers.llm.stream.StreamAssembler`, the same assembler
the api harness uses), the Responses API's from ``response.completed.response.usage`` (whose
``input_tokens`` include the cached ones), and a plain JSON answer from its ``usage``.

A :class:`Meter` is fed the body chunk by chunk, exactly as relayed, and never changes it; it
reads the body once the last byte has gone to the harness, so relaying a chunk costs no parsing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from shared.usage import Usage
from workers.llm.stream import StreamAssembler


class Api(str, Enum):
    """The model endpoints a harness may call through the gateway."""

    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"
    RESPONSES = "responses"


@dataclass
class Metered:
    """What one answered call said: None of ``usage`` means it cannot be charged (it failed)."""

    usage: Usage | None
    content: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    stop_reason: str | None = None
    error: str | None = None


# Responses API events that end a response and carry it, usage included.
_RESPONSE_ENDS = ("response.completed", "response.incomplete", "response.failed")


class Meter:
    """Fed a response body as it is relayed; says at the end what the call used."""

    def __init__(self, api: Api, *, streamed: bool) -> None:
        self.api = api
        self.streamed = streamed
        self._chunks: list[bytes] = []
        self._assembler = StreamAssembler(lambda text: None)
        self._started = False
        self._stopped = False
        self._response: dict[str, Any] | None = None
        self._error: str | None = None

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk``: the body is read once it has all been relayed, never in between."""
        self._chunks.append(chunk)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            self._error = json.dumps(error if error is not None else event)[:300]
        elif self.api is Api.RESPONSES:
            if kind in _RESPONSE_ENDS and isinstance(event.get("response"), dict):
                self._response = event["response"]
        else:
            self._started = self._started or kind == "message_start"
            self._stopped = self._stopped or kind == "message_stop"
            self._assembler.feed(event)

    def result(self) -> Metered:
        """What the call used; ``usage`` None when the answer was not whole or was an error.
        Read once, when the whole body has been fed."""
        body = b"".join(self._chunks)
        if not self.streamed:
            return _whole_result(self.api, body)
        for event in _events(body):
            self._event(event)
        if self._error is not None:
            return Metered(usage=None, error=self._error)
        if self.api is Api.RESPONSES:
            return _response_result(self._response)
        if not self._started:
            return Metered(usage=None, error="the stream ended before message_start")
        assembled = self._assembler.result()
        metered = Metered(
            usage=assembled.usage,
            content=assembled.content,
            model=assembled.model,
            stop_reason=assembled.stop_reason,
        )
        if not self._stopped and assembled.stop_reason is None:
            # Cut off: the tokens were used (and are charged) but the answer is not whole.
            metered.error = "the stream ended without a stop reason"
        return metered


def _whole_result(api: Api, data: bytes) -> Metered:
    try:
        body = json.loads(data)
    except ValueError:
        return Metered(usage=None, error="the answer is not JSON")
    if not isinstance(body, dict):
        return Metered(usage=None, error="the answer is not a JSON object")
    if api is Api.RESPONSES:
        return _response_result(body)
    if not isinstance(body.get("usage"), dict):
        return Metered(usage=None, error="the answer has no usage")
    return Metered(
        usage=_usage(body["usage"]),
        content=[b for b in body.get("content") or [] if isinstance(b, dict)],
        model=body.get("model"),
        stop_reason=body.get("stop_reason"),
    )


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(**{name: raw[name] for name in Usage.model_fields if isinstance(raw.get(name), int)})


def _response_result(response: dict[str, Any] | None) -> Metered:
    """The Responses API's usage as ours: its ``input_tokens`` count the cached ones too."""
    usage = response.get("usage") if response is not None else None
    if response is None or not isinstance(usage, dict):
        return Metered(usage=None, error="the response ended without its usage")
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    total_in = usage.get("input_tokens", 0)
    return Metered(
        usage=Usage(
            input_tokens=max(total_in - cached, 0),
            cache_read_input_tokens=cached,
            output_tokens=usage.get("output_tokens", 0),
        ),
        content=[item for item in response.get("output") or [] if isinstance(item, dict)],
        model=response.get("model"),
        stop_reason=response.get("status"),
    )


def _events(body: bytes) -> Iterator[dict[str, Any]]:
    """The JSON data of each whole SSE event of ``body`` (what follows its last blank line is an
    event cut off). Lines end in CRLF, LF or CR alike."""
    blocks = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n")
    for block in blocks[:-1]:
        lines = block.split(b"\n")
        data = b"\n".join(line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:"))
        if not data:
            continue
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event
