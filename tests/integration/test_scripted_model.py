"""The scripted model server, exercised through the real ``anthropic`` SDK on loopback."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from workers.scripted_model import LoggedRequest, Script, ScriptedModelServer

pytestmark = pytest.mark.integration

STREAMS = Path(__file__).parents[1] / "fixtures" / "anthropic-streams"
MODEL = "claude-sonnet-4-6"
ASK: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Make the tests pass."}],
}
BASH_CALL = {
    "type": "tool_use",
    "name": "bash",
    "input": {"command": "pytest -q tests/unit", "timeout_s": 120},
}

Scripted = tuple[ScriptedModelServer, anthropic.Anthropic]


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    """Start a server on a script (a dict, or a Script) and give a real SDK client for it."""
    with ExitStack() as stack:

        def start(script: dict[str, Any] | Script, *, max_retries: int = 0, **kwargs: Any) -> Scripted:
            if isinstance(script, dict):
                script = Script.model_validate(script)
            server = stack.enter_context(ScriptedModelServer(script, **kwargs))
            client = anthropic.Anthropic(
                base_url=server.base_url, api_key="test-key", max_retries=max_retries
            )
            stack.enter_context(client)
            return server, client

        yield start


def replay(name: str) -> dict[str, Any]:
    return {"replay": str(STREAMS / f"{name}.txt")}


def test_streamed_text_arrives_in_several_deltas_and_the_final_message_has_text_and_usage(
    scripted: Callable[..., Scripted],
) -> None:
    text = "I read the failing test. The fixture path is wrong, so I will fix it next."
    usage = {
        "input_tokens": 1200,
        "output_tokens": 40,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 5000,
    }
    _, client = scripted({"responses": [{"content": [{"type": "text", "text": text}], "usage": usage}]})

    with client.messages.stream(**ASK) as stream:
        deltas = list(stream.text_stream)
        message = stream.get_final_message()

    assert len(deltas) >= 5
    assert "".join(deltas) == text
    assert message.content[0].type == "text"
    assert message.content[0].text == text
    assert message.stop_reason == "end_turn"
    assert message.model == MODEL
    assert message.id.startswith("msg_")
    assert message.usage.model_dump(include=set(usage)) == usage


def test_usage_left_out_of_the_script_is_estimated_from_request_and_response(
    scripted: Callable[..., Scripted],
) -> None:
    text = "All twelve tests pass now."
    _, client = scripted({"responses": [{"content": [{"type": "text", "text": text}]}]})

    with client.messages.stream(**ASK) as stream:
        usage = stream.get_final_message().usage

    prompt = json.dumps({"messages": ASK["messages"]}, separators=(",", ":"))
    assert usage.input_tokens == math.ceil(len(prompt) / 4)
    assert usage.output_tokens == math.ceil(len(text) / 4)
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)


def test_a_request_without_stream_gets_the_plain_json_message(scripted: Callable[..., Scripted]) -> None:
    server, client = scripted({"responses": [{"content": [{"type": "text", "text": "Done."}, BASH_CALL]}]})

    message = client.messages.create(**ASK)

    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.stop_reason == "tool_use"
    assert message.model == MODEL
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == BASH_CALL["input"]
    assert server.requests()[0].body.get("stream") is None


def test_tool_input_is_assembled_by_the_sdk_from_partial_json_deltas(
    scripted: Callable[..., Scripted],
) -> None:
    _, client = scripted(
        {"responses": [{"content": [{"type": "text", "text": "Running the tests."}, BASH_CALL]}]}
    )

    partials: list[str] = []
    with client.messages.stream(**ASK) as stream:
        for event in stream:
            if event.type == "input_json":
                partials.append(event.partial_json)
        message = stream.get_final_message()

    tool_use = message.content[1]
    assert tool_use.type == "tool_use"
    assert tool_use.id.startswith("toolu_")
    assert (tool_use.name, tool_use.input) == ("bash", BASH_CALL["input"])
    assert message.stop_reason == "tool_use"
    assert len(partials) >= 4
    assert "".join(partials) == json.dumps(BASH_CALL["input"])


def test_tool_results_sent_back_appear_in_the_request_log(scripted: Callable[..., Scripted]) -> None:
    # Given a script that calls a tool and then finishes
    server, client = scripted(
        {"responses": [{"content": [BASH_CALL]}, {"content": [{"type": "text", "text": "Ok"}]}]}
    )

    # When the client runs the tool loop for two turns
    first = client.messages.create(**ASK)
    tool_use = first.content[0]
    assert tool_use.type == "tool_use"
    result = {"type": "tool_result", "tool_use_id": tool_use.id, "content": "12 passed"}
    follow_up = [*ASK["messages"], {"role": "assistant", "content": [tool_use.model_dump(exclude_none=True)]}]
    client.messages.create(**{**ASK, "messages": [*follow_up, {"role": "user", "content": [result]}]})

    # Then the server saw the tool result, the credential hidden, and which step answered each
    second = server.requests()[1]
    assert second.body["messages"][-1]["content"] == [result]
    credentials = {
        name: value for name, value in second.headers.items() if name in {"x-api-key", "authorization"}
    }
    assert credentials
    assert set(credentials.values()) == {"[redacted]"}
    assert not any("test-key" in value for value in second.headers.values())
    assert [(entry.session, entry.turn, entry.step) for entry in server.requests()] == [
        ("default", 0, 0),
        ("default", 1, 1),
    ]


def test_rate_limit_raises_rate_limit_error_with_the_retry_after_header(
    scripted: Callable[..., Scripted],
) -> None:
    _, client = scripted(
        {"responses": [{"error": {"status": 429, "retry_after_s": 1.5, "message": "slow down"}}]}
    )

    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(**ASK)

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1.5"
    assert "x-should-retry" not in caught.value.response.headers
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }
    assert caught.value.request_id is not None
    assert caught.value.request_id.startswith("req_")


def test_the_sdk_retries_a_scripted_error_and_honours_retry_after(scripted: Callable[..., Scripted]) -> None:
    server, client = scripted(
        {
            "responses": [
                {"error": {"status": 429, "retry_after_s": 0.2}},
                {"content": [{"type": "text", "text": "Ok"}]},
            ]
        },
        max_retries=2,
    )

    started = time.monotonic()
    message = client.messages.create(**ASK)

    assert time.monotonic() - started >= 0.2
    assert message.content[0].type == "text"
    assert [entry.headers["x-stainless-retry-count"] for entry in server.requests()] == ["0", "1"]


@pytest.mark.parametrize(
    ("error", "exception", "status"),
    [
        ({"status": 529}, anthropic.OverloadedError, 529),
        ({"type": "overloaded_error"}, anthropic.OverloadedError, 529),
        ({"status": 401}, anthropic.AuthenticationError, 401),
        ({"status": 400, "message": "prompt is too long"}, anthropic.BadRequestError, 400),
        ({"status": 413}, anthropic.ContentTooLargeError, 413),
        ({"status": 500}, anthropic.InternalServerError, 500),
    ],
)
def test_http_errors_raise_the_sdk_class_for_their_status(
    scripted: Callable[..., Scripted],
    error: dict[str, Any],
    exception: type[anthropic.APIStatusError],
    status: int,
) -> None:
    _, client = scripted({"responses": [{"error": error}]})

    with pytest.raises(exception) as caught, client.messages.stream(**ASK):
        pass

    assert caught.value.status_code == status


def test_a_mid_stream_error_is_raised_after_the_200_and_not_retried(
    scripted: Callable[..., Scripted],
) -> None:
    # Given a client that retries, and a script whose first answer fails mid-stream
    error_step = {
        "error": {"type": "overloaded_error"},
        "mid_stream": True,
        "partial_text": "Let me look at the",
    }
    server, client = scripted(
        {"responses": [error_step, {"content": [{"type": "text", "text": "Ok"}]}]}, max_retries=2
    )

    # When the stream is read
    seen: list[str] = []
    with client.messages.stream(**ASK) as stream:
        status = stream.response.status_code
        with pytest.raises(anthropic.APIStatusError) as caught:
            seen.extend(stream.text_stream)

    # Then the SDK raised the bare APIStatusError (status 200) after the text, and did not retry
    assert status == 200
    assert type(caught.value) is anthropic.APIStatusError
    assert caught.value.status_code == 200
    assert caught.value.type == "overloaded_error"
    assert "".join(seen) == "Let me look at the"
    assert len(server.requests()) == 1


def test_a_non_stream_request_gets_a_mid_stream_error_as_an_http_error(
    scripted: Callable[..., Scripted],
) -> None:
    _, client = scripted({"responses": [{"error": {"status": 529}, "mid_stream": True}]})

    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(**ASK)


def test_latency_delays_the_answer_by_at_least_latency_s(scripted: Callable[..., Scripted]) -> None:
    text_step = {"content": [{"type": "text", "text": "one two three four five six"}]}
    _, client = scripted(
        {
            "responses": [{**text_step, "latency_s": 0.3}, {**text_step, "delta_delay_s": 0.05}],
            "text_chunk_words": 1,
        }
    )

    started = time.monotonic()
    client.messages.create(**ASK)
    first = time.monotonic() - started
    started = time.monotonic()
    with client.messages.stream(**ASK) as stream:
        stream.until_done()
    second = time.monotonic() - started

    assert first >= 0.3
    # message_start, block start, ping, six deltas, block stop, message_delta, message_stop
    assert second >= 11 * 0.05


def test_each_session_walks_the_script_from_the_start(scripted: Callable[..., Scripted]) -> None:
    steps = [{"content": [{"type": "text", "text": f"turn {n}"}]} for n in range(2)]
    server, client = scripted({"responses": steps})

    def ask(project: str) -> str:
        message = client.messages.create(**ASK, metadata={"user_id": project})
        block = message.content[0]
        assert block.type == "text"
        return block.text

    answers = [ask("project-a"), ask("project-b"), ask("project-a"), ask("project-b")]

    assert answers == ["turn 0", "turn 0", "turn 1", "turn 1"]
    assert [entry.step for entry in server.requests("project-b")] == [0, 1]


def test_concurrent_sessions_do_not_disturb_each_other(scripted: Callable[..., Scripted]) -> None:
    steps = [{"content": [{"type": "text", "text": f"turn {n}"}], "delta_delay_s": 0.01} for n in range(3)]
    server, _ = scripted({"responses": steps})

    async def project(client: anthropic.AsyncAnthropic, name: str) -> list[str]:
        texts = []
        for _ in steps:
            async with client.messages.stream(**ASK, metadata={"user_id": name}) as stream:
                texts.append(await stream.get_final_text())
        return texts

    async def run_all() -> list[list[str]]:
        async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
            return await asyncio.gather(*(project(client, f"p{n}") for n in range(8)))

    assert asyncio.run(run_all()) == [["turn 0", "turn 1", "turn 2"]] * 8
    assert len(server.requests()) == 24


def test_an_exhausted_script_answers_500_and_tells_the_sdk_not_to_retry(
    scripted: Callable[..., Scripted],
) -> None:
    server, client = scripted({"responses": [{"content": []}]}, max_retries=2)
    client.messages.create(**ASK)

    with pytest.raises(anthropic.InternalServerError, match="script is exhausted") as caught:
        client.messages.create(**ASK)

    assert caught.value.response.headers["x-should-retry"] == "false"
    assert [entry.step for entry in server.requests()] == [0, None]


def test_basic_recorded_stream_gives_hello_there(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("basic_response")]})

    with client.messages.stream(**ASK) as stream:
        message = stream.get_final_message()

    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello there!"
    assert message.stop_reason == "end_turn"


def test_recorded_tool_use_stream_gives_the_assembled_input(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("tool_use_response")]})

    with client.messages.stream(**ASK) as stream:
        message = stream.get_final_message()

    tool_use = message.content[1]
    assert tool_use.type == "tool_use"
    assert (tool_use.name, tool_use.input) == ("get_weather", {"location": "Paris"})


def test_recorded_invalid_tool_json_makes_the_sdk_raise_value_error(
    scripted: Callable[..., Scripted],
) -> None:
    _, client = scripted({"responses": [replay("tool_use_invalid_json_response")]})

    with (
        pytest.raises(ValueError, match="Unable to parse tool parameter JSON"),
        client.messages.stream(**ASK) as stream,
    ):
        stream.get_final_message()


def test_recorded_truncated_tool_call_stops_on_max_tokens_with_a_parsed_tool_use(
    scripted: Callable[..., Scripted],
) -> None:
    _, client = scripted({"responses": [replay("incomplete_partial_json_response")]})

    with client.messages.stream(**ASK) as stream:
        message = stream.get_final_message()

    assert message.stop_reason == "max_tokens"
    tool_use = message.content[1]
    assert tool_use.type == "tool_use"
    assert isinstance(tool_use.input, dict)
    assert tool_use.input["filename"] == "taxes.txt"


def test_recorded_stream_without_start_usage_makes_the_sdk_raise(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("missing_usage_response")]})

    with pytest.raises(AttributeError, match="output_tokens"), client.messages.stream(**ASK) as stream:
        stream.get_final_message()


def test_recorded_refusal_stops_on_refusal_with_its_category(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("refusal_response")]})

    with client.messages.stream(**ASK) as stream:
        message = stream.get_final_message()

    assert message.stop_reason == "refusal"
    assert message.stop_details is not None
    assert message.stop_details.category == "cyber"


def test_recorded_out_of_order_stream_has_no_stop_reason(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("out_of_order_response")]})

    with client.messages.stream(**ASK) as stream:
        message = stream.get_final_message()

    assert message.stop_reason is None


@pytest.mark.parametrize("path", sorted(STREAMS.glob("*.txt")), ids=lambda path: path.stem)
def test_a_replayed_stream_is_the_recorded_file_byte_for_byte(
    scripted: Callable[..., Scripted], path: Path
) -> None:
    server, _ = scripted({"responses": [{"replay": str(path), "delta_delay_s": 0.001}]})

    response = httpx.post(f"{server.base_url}/v1/messages", json={**ASK, "stream": True})

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.content == path.read_bytes()


def test_replay_paths_in_a_script_file_are_relative_to_it(
    scripted: Callable[..., Scripted], tmp_path: Path
) -> None:
    (tmp_path / "basic.txt").write_bytes((STREAMS / "basic_response.txt").read_bytes())
    (tmp_path / "script.json").write_text(json.dumps({"responses": [{"replay": "basic.txt"}]}))
    _, client = scripted(Script.load(tmp_path / "script.json"))

    with client.messages.stream(**ASK) as stream:
        assert stream.get_final_text() == "Hello there!"


def test_a_replay_step_refuses_a_request_without_stream(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [replay("basic_response")]})

    with pytest.raises(anthropic.BadRequestError, match="answers only requests with stream=true"):
        client.messages.create(**ASK)


def test_the_log_and_reset_are_reachable_over_http_and_the_log_file_gets_json_lines(
    scripted: Callable[..., Scripted], tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.jsonl"
    server, client = scripted(
        {"responses": [{"content": []}], "when_exhausted": "repeat_last"}, log_path=log_path
    )
    client.messages.create(**ASK, metadata={"user_id": "project-7"})

    with httpx.Client(base_url=server.base_url) as http:
        logged = [LoggedRequest.model_validate(entry) for entry in http.get("/_scripted/requests").json()]
        assert http.get("/_scripted/health").json() == {
            "status": "ok",
            "steps": 1,
            "sessions": {"project-7": 1},
        }
        assert http.post("/_scripted/reset").status_code == 200
        assert http.get("/_scripted/requests").json() == []

    assert [(entry.session, entry.path, entry.body["model"]) for entry in logged] == [
        ("project-7", "/v1/messages", MODEL)
    ]
    assert [json.loads(line)["session"] for line in log_path.read_text().splitlines()] == ["project-7"]


def test_a_malformed_request_is_refused_like_the_api_and_still_logged(
    scripted: Callable[..., Scripted],
) -> None:
    server, _ = scripted({"responses": [{"content": []}]})

    response = httpx.post(f"{server.base_url}/v1/messages", json={"model": MODEL, "messages": []})

    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    assert [(entry.turn, entry.step) for entry in server.requests()] == [(None, None)]


def test_count_tokens_answers_an_estimate(scripted: Callable[..., Scripted]) -> None:
    _, client = scripted({"responses": [{"content": []}]})

    counted = client.messages.count_tokens(model=MODEL, messages=ASK["messages"])

    assert counted.input_tokens > 0


def test_serve_prints_the_real_port_when_given_port_zero(tmp_path: Path) -> None:
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps({"responses": [{"content": [{"type": "text", "text": "hi"}]}]}))
    code = "import sys, pathlib, workers.scripted_model as m; m.serve(pathlib.Path(sys.argv[1]))"
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(script_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.rsplit(" ", 1)[-1].strip()
        assert line.startswith("scripted model listening on http://127.0.0.1:")
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as client:
            message = client.messages.create(**ASK)
        assert message.content[0].type == "text"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
