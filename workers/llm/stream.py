"""Assembling a streamed Messages API response from its raw events, tolerantly.

The SDK's own accumulator crashes on a ``message_start`` without usage and raises on a tool
input that is not valid JSON; a worker must survive both and still count the usage that
arrives at the end. So we read the raw event stream (``messages.create(stream=True)``) and
build the reply ourselves, keeping what is broken visible instead of guessing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shared.usage import Usage


@dataclass
class _Block:
    type: str
    data: dict[str, Any]
    partial_json: list[str] = field(default_factory=list)


@dataclass
class Assembled:
    """What a stream said: content blocks, stop reason and details, usage, model."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_details: dict[str, Any] | None
    usage: Usage
    model: str | None
    # Tool uses whose input was not valid JSON: id -> the raw text received.
    invalid_tool_inputs: dict[str, str]


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _merge_usage(usage: dict[str, int], raw: Any) -> None:
    if raw is None:
        return
    for name in Usage.model_fields:
        value = _get(raw, name)
        if isinstance(value, int):
            usage[name] = value


def _plain(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    dumped: dict[str, Any] = value.model_dump(mode="json", exclude_none=True)
    return dumped


class StreamAssembler:
    def __init__(self, on_text: Callable[[str], None]) -> None:
        self._on_text = on_text
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._stop_details: dict[str, Any] | None = None
        self._model: str | None = None

    def feed(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind == "message_start":
            message = _get(event, "message")
            self._model = _get(message, "model")
            _merge_usage(self._usage, _get(message, "usage"))
        elif kind == "content_block_start":
            block = _plain(_get(event, "content_block"))
            self._blocks[_get(event, "index")] = _Block(type=block.get("type", "unknown"), data=block)
        elif kind == "content_block_delta":
            self._delta(_get(event, "index"), _get(event, "delta"))
        elif kind == "message_delta":
            delta = _get(event, "delta")
            self._stop_reason = _get(delta, "stop_reason")
            details = _get(delta, "stop_details")
            self._stop_details = _plain(details) if details is not None else None
            _merge_usage(self._usage, _get(event, "usage"))

    def _delta(self, index: int, delta: Any) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        kind = _get(delta, "type")
        if kind == "text_delta":
            text = _get(delta, "text") or ""
            block.data["text"] = block.data.get("text", "") + text
            self._on_text(text)
        elif kind == "input_json_delta":
            block.partial_json.append(_get(delta, "partial_json") or "")
        elif kind == "thinking_delta":
            block.data["thinking"] = block.data.get("thinking", "") + (_get(delta, "thinking") or "")
        elif kind == "signature_delta":
            block.data["signature"] = _get(delta, "signature")

    def result(self) -> Assembled:
        content: list[dict[str, Any]] = []
        invalid: dict[str, str] = {}
        for index in sorted(self._blocks):
            block = self._blocks[index]
            data = dict(block.data)
            if block.type == "tool_use":
                raw = "".join(block.partial_json)
                try:
                    data["input"] = json.loads(raw) if raw.strip() else (data.get("input") or {})
                except json.JSONDecodeError:
                    invalid[data.get("id", "")] = raw
                    data["input"] = {}
                data = {k: data[k] for k in ("type", "id", "name", "input") if k in data}
            content.append(data)
        return Assembled(
            content=content,
            stop_reason=self._stop_reason,
            stop_details=self._stop_details,
            usage=Usage(**self._usage),
            model=self._model,
            invalid_tool_inputs=invalid,
        )


def assemble(events: Iterable[Any], on_text: Callable[[str], None]) -> Assembled:
    assembler = StreamAssembler(on_text)
    for event in events:
        assembler.feed(event)
    return assembler.result()
