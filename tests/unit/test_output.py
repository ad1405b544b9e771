"""Text deltas are coalesced into fewer chunks, and nothing is lost."""

from __future__ import annotations

import time

import pytest

from workers.agent.output import OutputCoalescer

pytestmark = pytest.mark.unit


def test_many_small_deltas_become_few_chunks_with_the_same_text() -> None:
    sent: list[str] = []
    coalescer = OutputCoalescer(sent.append, window_s=3600)
    for word in ["Hel", "lo", ", ", "wor", "ld"]:
        coalescer.add(word)
    assert sent == []
    coalescer.flush()
    assert sent == ["Hello, world"]


def test_a_zero_window_sends_every_delta() -> None:
    sent: list[str] = []
    coalescer = OutputCoalescer(sent.append, window_s=0)
    coalescer.add("a")
    coalescer.add("b")
    coalescer.flush()
    assert sent == ["a", "b"]


def test_text_is_sent_when_the_window_closes_even_without_another_delta() -> None:
    sent: list[str] = []
    coalescer = OutputCoalescer(sent.append, window_s=0.05)
    coalescer.add("the last ")
    coalescer.add("words")
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == ["the last words"]
    coalescer.flush()
    assert sent == ["the last words"]
