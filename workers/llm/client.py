"""Calling Claude through the official SDK, streaming, and turning the answer into plain data."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic

from shared.errors import InvalidInput
from shared.settings import Settings
from shared.usage import Usage
from workers.llm.stream import assemble

# Any key is accepted by the scripted model; the real API refuses it with 401.
PLACEHOLDER_KEY = "scripted-model-no-key"


# The request header naming the project a model call belongs to: the gateway adds it to every
# call it relays, and the scripted model keeps one script cursor per value.
SESSION_HEADER = "x-raas-session"


def make_client(settings: Settings, timeout_s: float = 600.0) -> anthropic.Anthropic:
    """The SDK client, configured the way the SDK reads its environment.

    The SDK's own retries are off: one retry policy (workers.llm.retry) covers every call, errors
    in the middle of a stream included, and says in an event when it waits.
    """
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    if key is None and settings.anthropic_base_url is None:
        msg = "ANTHROPIC_API_KEY is not set; set it, or point ANTHROPIC_BASE_URL at a scripted model"
        raise InvalidInput(msg)
    return anthropic.Anthropic(
        api_key=key or PLACEHOLDER_KEY, base_url=settings.anthropic_base_url, max_retries=0, timeout=timeout_s
    )


# One client per process and configuration (see shared_client).
_SHARED: dict[tuple[str | None, str | None, float], anthropic.Anthropic] = {}
_making_shared = threading.Lock()


def shared_client(settings: Settings, timeout_s: float = 600.0) -> anthropic.Anthropic:
    """The process's client for ``settings``, made on first use and shared by every iteration.

    The client is thread-safe and its connection pool keeps up to 100 connections alive, so the
    iterations of a threads worker share one; making a client costs ~0.2 s of CPU (its TLS
    context), which a busy worker would otherwise pay for every iteration.

    Raises:
        InvalidInput: as :func:`make_client` (nothing is kept then).
    """
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    with _making_shared:
        client = _SHARED.get((key, settings.anthropic_base_url, timeout_s))
        if client is None:
            client = _SHARED[(key, settings.anthropic_base_url, timeout_s)] = make_client(settings, timeout_s)
        return client


def close_shared_clients() -> None:
    """Close the shared clients (a worker stopping); the next ``shared_client`` makes another."""
    with _making_shared:
        clients = list(_SHARED.values())
        _SHARED.clear()
    for client in clients:
        client.close()


@dataclass(frozen=True)
class Reply:
    """One LLM call's answer, as plain JSON-able data."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_details: dict[str, Any] | None
    usage: Usage
    model: str
    duration_s: float
    invalid_tool_inputs: dict[str, str]

    def tool_uses(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]

    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")


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
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "system": system,
        "tools": tools,
        "messages": messages,
        "metadata": {"user_id": session_key},
    }
    stream = client.messages.create(**params, stream=True)
    with stream:
        assembled = assemble(stream, on_text)
    return Reply(
        content=assembled.content,
        stop_reason=assembled.stop_reason,
        stop_details=assembled.stop_details,
        usage=assembled.usage,
        model=assembled.model or model,
        duration_s=time.monotonic() - started,
        invalid_tool_inputs=assembled.invalid_tool_inputs,
    )


def count_tokens(
    client: anthropic.Anthropic,
    *,
    model: str,
    system: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    session_key: str,
) -> int:
    """The provider's count of a request's input tokens (free; the ledger sizes a call near the
    budget's end by it, :mod:`workers.ledger`). A count takes no ``metadata``: the session goes
    in :data:`SESSION_HEADER`, as the gateway sends it."""
    counted = client.messages.count_tokens(
        model=model,
        system=system,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
        extra_headers={SESSION_HEADER: session_key},
    )
    return int(counted.input_tokens)
