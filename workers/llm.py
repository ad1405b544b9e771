"""Calling Claude through the official SDK, streaming, and turning the answer into plain data."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic

from shared.errors import InvalidInput
from shared.pricing import Usage
from shared.settings import Settings

# Any key is accepted by the scripted model; the real API refuses it with 401.
PLACEHOLDER_KEY = "scripted-model-no-key"


def make_client(settings: Settings) -> anthropic.Anthropic:
    """The SDK client, configured the way the SDK reads its environment."""
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    if key is None and settings.anthropic_base_url is None:
        msg = "ANTHROPIC_API_KEY is not set; set it, or point ANTHROPIC_BASE_URL at a scripted model"
        raise InvalidInput(msg)
    return anthropic.Anthropic(api_key=key or PLACEHOLDER_KEY, base_url=settings.anthropic_base_url)


@dataclass(frozen=True)
class Reply:
    """One LLM call's answer, as plain JSON-able data."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    model: str
    duration_s: float

    def tool_uses(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]

    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")


def _usage(raw: Any) -> Usage:
    return Usage(
        input_tokens=raw.input_tokens or 0,
        output_tokens=raw.output_tokens or 0,
        cache_creation_input_tokens=getattr(raw, "cache_creation_input_tokens", None) or 0,
        cache_read_input_tokens=getattr(raw, "cache_read_input_tokens", None) or 0,
    )


def _block(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    data: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return data


def call(
    client: anthropic.Anthropic,
    *,
    model: str,
    max_tokens: int,
    system: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    session_key: str,
    on_text: Callable[[str], None],
) -> Reply:
    """Stream one call, handing each text delta to ``on_text`` as it arrives."""
    started = time.monotonic()
    with client.messages.stream(
        model=model,
        max_tokens=max_tokens,
        system=system,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
        metadata={"user_id": session_key},
    ) as stream:
        for text in stream.text_stream:
            on_text(text)
        final = stream.get_final_message()
    return Reply(
        content=[_block(b) for b in final.content],
        stop_reason=final.stop_reason,
        usage=_usage(final.usage),
        model=final.model or model,
        duration_s=time.monotonic() - started,
    )
