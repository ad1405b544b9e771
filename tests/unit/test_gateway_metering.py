"""What a gateway call used is read from the answer as relayed, however it was cut into chunks
(DESIGN.md rule 9): the meter keeps the chunks and reads them once the last byte is out.
"""

from __future__ import annotations

import json

import pytest

from shared.usage import Usage
from tests.support.records import STREAMS
from workers.gateway.metering import Api, Meter, Metered

pytestmark = pytest.mark.unit

BASIC = (STREAMS / "basic_response.txt").read_bytes()
TOOL_USE = (STREAMS / "tool_use_response.txt").read_bytes()


def metered(api: Api, body: bytes, *, size: int, streamed: bool = True) -> Metered:
    meter = Meter(api, streamed=streamed)
    for start in range(0, len(body), size):
        meter.feed(body[start : start + size])
    return meter.result()


@pytest.mark.parametrize("size", [1, 7, 100, 1 << 20])
def test_a_stream_reads_the_same_however_it_is_chunked(size: int) -> None:
    whole = metered(Api.MESSAGES, TOOL_USE, size=1 << 20)
    assert whole.usage is not None
    assert whole.usage.output_tokens == 65
    assert [block["type"] for block in whole.content] == ["text", "tool_use"]
    assert metered(Api.MESSAGES, TOOL_USE, size=size) == whole


def test_crlf_and_cr_line_ends_read_as_lf() -> None:
    lf = metered(Api.MESSAGES, BASIC, size=5)
    assert lf.usage == Usage(input_tokens=11, output_tokens=6)
    assert lf.content == [{"type": "text", "text": "Hello there!"}]
    assert metered(Api.MESSAGES, BASIC.replace(b"\n", b"\r\n"), size=5) == lf
    assert metered(Api.MESSAGES, BASIC.replace(b"\n", b"\r"), size=5) == lf


def test_a_stream_cut_off_is_charged_what_it_said_and_marked_not_whole() -> None:
    # Cut inside the first text delta: only message_start's usage has been seen.
    cut = BASIC[: BASIC.index(b'"Hello"') + 3]
    result = metered(Api.MESSAGES, cut, size=64)
    assert result.usage == Usage(input_tokens=11, output_tokens=1)
    assert result.error == "the stream ended without a stop reason"


def test_an_error_event_makes_the_call_unchargeable() -> None:
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
    result = metered(Api.MESSAGES, BASIC[: BASIC.index(b"event: ping")] + error, size=9)
    assert result.usage is None
    assert result.error is not None
    assert "overloaded_error" in result.error


def test_a_responses_stream_is_read_from_its_completed_event_cached_tokens_apart() -> None:
    usage = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 7}
    done = {"model": "gpt-5.5", "status": "completed", "output": [{"type": "message"}], "usage": usage}
    events = [
        {"type": "response.created", "response": {"status": "in_progress"}},
        {"type": "response.output_text.delta", "delta": "hi"},
        {"type": "response.completed", "response": done},
    ]
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    result = metered(Api.RESPONSES, body, size=3)
    assert result.usage == Usage(input_tokens=20, cache_read_input_tokens=100, output_tokens=7)
    assert (result.model, result.stop_reason) == ("gpt-5.5", "completed")


def test_a_plain_json_answer_is_read_whole() -> None:
    answer = {"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 3, "output_tokens": 2}}
    result = metered(Api.MESSAGES, json.dumps(answer).encode(), size=4, streamed=False)
    assert result.usage == Usage(input_tokens=3, output_tokens=2)
    assert result.content == [{"type": "text", "text": "ok"}]
