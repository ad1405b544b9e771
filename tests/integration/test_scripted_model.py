"""The scripted model server, exercised through the real ``anthropic`` SDK on loopback."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from shared.errors import InvalidInput
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


def test_a_gathered_step_answers_nobody_until_all_have_asked(scripted: Callable[..., Scripted]) -> None:
    steps = [{"content": [{"type": "text", "text": "done"}], "gather": 3}]
    server, client = scripted({"responses": steps, "when_exhausted": "repeat_last"})
    answered: list[str] = []

    def ask(name: str) -> None:
        client.messages.create(**ASK, metadata={"user_id": name})
        answered.append(name)

    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(ask, "p0"), pool.submit(ask, "p1")]
        # two of three have asked: neither is answered, however long they wait
        time.sleep(1.0)
        assert answered == []
        assert len(server.requests()) == 2
        # the third one releases all three
        pool.submit(ask, "p2").result(timeout=10)
        for future in held:
            future.result(timeout=10)
    assert sorted(answered) == ["p0", "p1", "p2"]
    # and once gathered, the step holds nobody again
    ask("p3")
    assert answered[-1] == "p3"


def test_a_gathered_step_answers_anyway_after_its_timeout(scripted: Callable[..., Scripted]) -> None:
    steps = [{"content": [{"type": "text", "text": "done"}], "gather": 5, "gather_timeout_s": 0.5}]
    _, client = scripted({"responses": steps})

    message = client.messages.create(**ASK)

    assert message.content[0].type == "text"


def test_a_held_step_answers_its_gathered_requests_only_once_released(
    scripted: Callable[..., Scripted],
) -> None:
    steps = [{"content": [{"type": "text", "text": "done"}], "gather": 2, "hold": True}]
    server, client = scripted({"responses": steps, "when_exhausted": "repeat_last"})
    answered: list[str] = []

    def ask(name: str) -> None:
        client.messages.create(**ASK, metadata={"user_id": name})
        answered.append(name)

    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(ask, "p0"), pool.submit(ask, "p1")]
        # both have asked (the gather is complete), and still neither is answered
        time.sleep(1.0)
        assert len(server.requests()) == 2
        assert answered == []
        # until the test releases them
        httpx.post(f"{server.base_url}/_scripted/release", timeout=5).raise_for_status()
        for future in held:
            future.result(timeout=10)
    assert sorted(answered) == ["p0", "p1"]


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


def test_one_server_answers_on_its_unix_socket_and_on_tcp_with_one_cursor(tmp_path: Path) -> None:
    steps = [{"content": [{"type": "text", "text": f"turn {n}"}]} for n in range(2)]
    socket_path = tmp_path / "model.sock"
    with ScriptedModelServer(Script.model_validate({"responses": steps}), unix_path=socket_path) as server:
        over_socket = anthropic.Anthropic(
            base_url="http://localhost",
            api_key="k",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path))),
        )
        over_tcp = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
        with over_socket, over_tcp:
            first = over_socket.messages.create(**ASK, metadata={"user_id": "p1"})
            second = over_tcp.messages.create(**ASK, metadata={"user_id": "p1"})
        assert server.unix_path == socket_path
        assert socket_path.stat().st_mode & 0o777 == 0o666

    assert [first.content[0], second.content[0]] == [
        anthropic.types.TextBlock(type="text", text="turn 0", citations=None),
        anthropic.types.TextBlock(type="text", text="turn 1", citations=None),
    ]
    assert not socket_path.exists()


def test_a_stale_socket_file_is_replaced_and_another_file_is_refused(tmp_path: Path) -> None:
    script = Script.model_validate({"responses": [{"content": []}]})
    stale = tmp_path / "stale.sock"
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(stale))
    leftover.close()
    with (
        ScriptedModelServer(script, unix_path=stale),
        httpx.Client(transport=httpx.HTTPTransport(uds=str(stale))) as http,
    ):
        assert http.get("http://localhost/_scripted/health").json()["status"] == "ok"

    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    with pytest.raises(InvalidInput, match="exists and is not a socket"):
        ScriptedModelServer(script, unix_path=taken).start()
    assert taken.read_text() == "mine"


def test_raas_scripted_model_listens_on_tcp_and_unix_at_once(tmp_path: Path) -> None:
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps({"responses": [{"content": [{"type": "text", "text": "hi"}]}]}))
    socket_path = tmp_path / "model.sock"
    raas = Path(sys.executable).with_name("raas")
    process = subprocess.Popen(
        [raas, "scripted-model", "--script", script_path, "--port", "0", "--unix", socket_path],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline(), process.stdout.readline()]
        assert lines[0].startswith("scripted model listening on http://127.0.0.1:")
        assert lines[1] == f"scripted model listening on unix:{socket_path}\n"
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path))) as http:
            answer = http.post("http://localhost/v1/messages", json=ASK).json()
        assert answer["content"] == [{"type": "text", "text": "hi"}]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    assert not socket_path.exists()


CLAUDE_USER_ID = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": "cc-session"})


@pytest.mark.parametrize(
    ("headers", "metadata", "session"),
    [
        (
            {"x-raas-session": "project-1", "x-claude-code-session-id": "cc-session"},
            {"user_id": "p"},
            "project-1",
        ),
        ({"x-claude-code-session-id": "cc-session"}, {"user_id": CLAUDE_USER_ID}, "cc-session"),
        ({}, {"user_id": CLAUDE_USER_ID}, "cc-session"),
        ({"session-id": "codex-thread", "thread-id": "codex-thread"}, None, "codex-thread"),
        ({"x-session-id": "ses_opencode"}, None, "ses_opencode"),
        ({}, {"user_id": "project-2"}, "project-2"),
        ({}, {"user_id": "{not json"}, "{not json"),
        ({}, None, "default"),
    ],
)
def test_the_session_is_the_gateway_header_then_the_harness_own_then_metadata(
    scripted: Callable[..., Scripted], headers: dict[str, str], metadata: dict[str, str] | None, session: str
) -> None:
    server, _ = scripted({"responses": [{"content": []}]})
    body = {**ASK, **({"metadata": metadata} if metadata else {})}

    assert httpx.post(f"{server.base_url}/v1/messages", json=body, headers=headers).status_code == 200

    assert [(entry.session, entry.turn) for entry in server.requests()] == [(session, 0)]


def opencode_title_request() -> dict[str, Any]:
    # The shape OpenCode 1.18.33 sends its small model before the first turn.
    system = "You are a title generator. You output ONLY a thread title. Nothing else.\n\n<task>..."
    return {
        "model": "claude-haiku-4-5",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": system}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Generate a title for this conversation:\n"}],
            }
        ],
    }


def test_a_title_side_request_is_answered_without_taking_a_turn(scripted: Callable[..., Scripted]) -> None:
    server, client = scripted({"responses": [{"content": [{"type": "text", "text": "the work"}]}]})
    opencode = {"x-session-id": "ses_1"}

    with client.messages.stream(**opencode_title_request(), extra_headers=opencode) as stream:
        title = stream.get_final_text()
    work = client.messages.create(**ASK, extra_headers=opencode)

    assert title == "Scripted session"
    assert work.content[0].type == "text"
    assert work.content[0].text == "the work"
    logged = [(entry.session, entry.turn, entry.step, entry.side_request) for entry in server.requests()]
    assert logged == [("ses_1", None, None, "title"), ("ses_1", 0, 0, None)]


def responses_events(base_url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
    """POST /v1/responses with stream=true and parse the SSE body: (event name, data) pairs."""
    with httpx.stream(
        "POST", f"{base_url}/v1/responses", json={**body, "stream": True}, headers=headers
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    events = []
    for chunk in raw.strip().split("\n\n"):
        name_line, data_line = chunk.split("\n")
        events.append((name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return events


RESPONSES_ASK: dict[str, Any] = {
    "model": "gpt-5.5",
    "instructions": "You are a coding agent.",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}],
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
}


def test_the_responses_api_streams_text_function_and_custom_tool_calls_with_usage(
    scripted: Callable[..., Scripted],
) -> None:
    text = "I will run the tests and then patch the file."
    patch = "*** Begin Patch\n*** Add File: a.py\n+print(1)\n*** End Patch\n"
    step = {
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "name": "exec_command", "input": {"cmd": "pytest -q"}, "id": "call_1"},
            {"type": "tool_use", "name": "apply_patch", "input": patch, "id": "call_2"},
        ],
        "usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 40},
    }
    server, _ = scripted({"responses": [step]})

    events = responses_events(server.base_url, RESPONSES_ASK, {"session-id": "thread-1"})

    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert [data["type"] for name, data in events] == names
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    by_name: dict[str, list[Any]] = {}
    for name, data in events:
        by_name.setdefault(name, []).append(data)
    text_deltas = [data["delta"] for data in by_name["response.output_text.delta"]]
    assert len(text_deltas) >= 3
    assert "".join(text_deltas) == text
    arguments = "".join(data["delta"] for data in by_name["response.function_call_arguments.delta"])
    assert json.loads(arguments) == {"cmd": "pytest -q"}
    assert len(by_name["response.function_call_arguments.delta"]) >= 2
    assert "".join(data["delta"] for data in by_name["response.custom_tool_call_input.delta"]) == patch
    done = [data["item"] for data in by_name["response.output_item.done"]]
    assert [(item["type"], item.get("call_id"), item.get("name")) for item in done] == [
        ("message", None, None),
        ("function_call", "call_1", "exec_command"),
        ("custom_tool_call", "call_2", "apply_patch"),
    ]
    completed = by_name["response.completed"][0]["response"]
    assert completed["status"] == "completed"
    assert completed["output"] == done
    assert completed["model"] == "gpt-5.5"
    # The Responses API counts cached tokens inside input_tokens.
    assert completed["usage"] == {
        "input_tokens": 1000,
        "input_tokens_details": {"cached_tokens": 900},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1040,
    }
    assert [(entry.session, entry.path, entry.turn) for entry in server.requests()] == [
        ("thread-1", "/v1/responses", 0)
    ]


def test_the_responses_api_answers_json_without_stream_and_openai_errors(
    scripted: Callable[..., Scripted],
) -> None:
    steps = [
        {"content": [{"type": "text", "text": "plain"}]},
        {"error": {"status": 401}},
        {"error": {"type": "rate_limit_error"}, "mid_stream": True, "partial_text": "Let me"},
    ]
    server, _ = scripted({"responses": steps})
    url = f"{server.base_url}/v1/responses"

    plain = httpx.post(url, json=RESPONSES_ASK).json()
    denied = httpx.post(url, json=RESPONSES_ASK)
    failed = responses_events(server.base_url, RESPONSES_ASK)
    exhausted = httpx.post(url, json=RESPONSES_ASK)
    malformed = httpx.post(url, json={"model": "gpt-5.5"})

    assert plain["object"] == "response"
    assert plain["output"][0]["content"][0]["text"] == "plain"
    assert plain["usage"]["input_tokens"] > 0
    assert denied.status_code == 401
    assert denied.json()["error"]["code"] == "invalid_api_key"
    assert [name for name, _ in failed][-1] == "response.failed"
    assert "response.completed" not in [name for name, _ in failed]
    assert failed[-1][1]["response"]["error"]["code"] == "rate_limit_exceeded"
    assert "".join(data["delta"] for name, data in failed if name == "response.output_text.delta") == "Let me"
    assert exhausted.status_code == 500
    assert exhausted.headers["x-should-retry"] == "false"
    assert exhausted.json()["error"]["type"] == "server_error"
    assert malformed.status_code == 400
    assert malformed.json()["error"]["message"] == "input: Field required"


def test_each_variant_keeps_its_own_cursor_per_session_and_others_walk_the_script(
    scripted: Callable[..., Scripted],
) -> None:
    # Given a script whose reviewer requests and Codex requests have steps of their own
    def said(text: str) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}]}

    server, client = scripted(
        {
            "responses": [said("builder 0"), said("builder 1")],
            "variants": [
                {"name": "reviewer", "when": {"prompt_contains": "You are the reviewer"},
                 "responses": [said("review 0"), said("review 1")]},
                {"name": "codex", "when": {"offers_tool": "exec_command"},
                 "responses": [said("codex 0")], "when_exhausted": "repeat_last"},
            ],
        }
    )  # fmt: skip

    def ask(project: str, system: str | None = None) -> str:
        extra = {"system": system} if system is not None else {}
        message = client.messages.create(**ASK, **extra, metadata={"user_id": project})
        block = message.content[0]
        assert block.type == "text"
        return block.text

    # When a project's builder and reviewer take turns, and another project's builder asks
    answers = [
        ask("p1"),
        ask("p1", "You are the reviewer of a builder agent's work."),
        ask("p1"),
        ask("p2"),
        ask("p1", "You are the reviewer of a builder agent's work."),
    ]
    codex = [
        [d["delta"] for n, d in responses_events(server.base_url, RESPONSES_ASK, {"session-id": "t"})
         if n == "response.output_text.delta"]
        for _ in range(2)
    ]  # fmt: skip

    # Then each walks its own steps from its own start, and the log names the variant
    assert answers == ["builder 0", "review 0", "builder 1", "builder 0", "review 1"]
    assert ["".join(deltas).strip() for deltas in codex] == ["codex 0", "codex 0"]
    assert [(e.variant, e.step) for e in server.requests("p1")] == [
        (None, 0), ("reviewer", 0), (None, 1), ("reviewer", 1)
    ]  # fmt: skip
