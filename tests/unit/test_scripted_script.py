"""The scripted model's script format: what loads, what is refused and how the refusal reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from shared.errors import InvalidInput
from workers.scripted_model.script import (
    ErrorSpec,
    ErrorStep,
    MessageStep,
    ReplayStep,
    Script,
    ToolUseBlock,
    Usage,
)
from workers.scripted_model.sse import json_chunks, text_chunks

pytestmark = pytest.mark.unit

TEXT_STEP: dict[str, Any] = {"content": [{"type": "text", "text": "Done."}]}


def write_script(directory: Path, data: Any) -> Path:
    path = directory / "script.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def load_error(tmp_path: Path, data: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        Script.load(write_script(tmp_path, data))
    return str(caught.value)


def test_each_step_kind_is_recognised_by_its_key() -> None:
    script = Script.model_validate(
        {"responses": [TEXT_STEP, {"error": {"status": 429}}, {"replay": "recorded.txt"}]}
    )

    assert [type(step) for step in script.responses] == [MessageStep, ErrorStep, ReplayStep]
    assert script.when_exhausted == "error"


def test_stop_reason_defaults_to_tool_use_only_when_a_tool_is_called() -> None:
    tool_call = {"type": "tool_use", "name": "bash", "input": {"command": "ls"}}
    truncated = {"content": [tool_call], "stop_reason": "max_tokens"}
    script = Script.model_validate({"responses": [TEXT_STEP, {"content": [tool_call]}, truncated]})

    reasons = [step.effective_stop_reason for step in script.responses if isinstance(step, MessageStep)]
    assert reasons == ["end_turn", "tool_use", "max_tokens"]


def test_a_wrong_value_is_reported_with_the_file_and_the_path_of_its_key(tmp_path: Path) -> None:
    bad = {**TEXT_STEP, "stop_reason": "finished"}

    message = load_error(tmp_path, {"responses": [TEXT_STEP, TEXT_STEP, bad]})

    assert message.startswith(f"{tmp_path / 'script.json'}: responses[2].stop_reason: Input should be")
    assert "'end_turn'" in message
    assert '(got "finished")' in message


def test_unknown_keys_are_refused_by_name_at_every_level(tmp_path: Path) -> None:
    data = {
        "responses": [
            {"content": [{"type": "text", "text": "hi", "colour": "red"}], "latency": 1},
            {"error": {"status": 500, "retry_after": 2}},
        ],
        "loop": True,
    }

    lines = load_error(tmp_path, data).splitlines()

    assert [line.split(": ", 1)[1] for line in lines] == [
        "responses[0].content[0].colour: unknown key",
        "responses[0].latency: unknown key",
        "responses[1].error.retry_after: unknown key",
        "loop: unknown key",
    ]


def test_a_step_of_no_known_kind_says_which_keys_a_step_needs(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"responses": [{"text": "hello"}]})

    assert message.endswith(
        'responses[0]: a step needs "content" (a message), "error" or "replay" (got keys: text)'
    )


def test_a_missing_required_key_is_named(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"responses": [{"content": [{"type": "tool_use", "input": {}}]}]})

    assert message.endswith("responses[0].content[0].name: required key is missing")


def test_an_empty_script_is_refused(tmp_path: Path) -> None:
    assert "responses: List should have at least 1 item" in load_error(tmp_path, {"responses": []})


@pytest.mark.parametrize(
    ("error", "status", "error_type"),
    [
        ({"status": 429}, 429, "rate_limit_error"),
        ({"status": 529}, 529, "overloaded_error"),
        ({"status": 413}, 413, "request_too_large"),
        ({"status": 503}, 503, "api_error"),
        ({"status": 418}, 418, "invalid_request_error"),
        ({"type": "authentication_error"}, 401, "authentication_error"),
        ({"status": 500, "type": "overloaded_error"}, 500, "overloaded_error"),
    ],
)
def test_an_error_needs_its_status_or_its_type_and_infers_the_other(
    error: dict[str, Any], status: int, error_type: str
) -> None:
    step = Script.model_validate({"responses": [{"error": error}]}).responses[0]

    assert isinstance(step, ErrorStep)
    assert (step.error.http_status, step.error.error_type) == (status, error_type)
    assert step.error.error_message


def test_an_error_with_neither_status_nor_type_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"responses": [{"error": {"message": "boom"}}]})

    assert message.endswith("responses[0].error: give the HTTP status, the error type, or both")


def test_an_error_status_must_be_an_http_error(tmp_path: Path) -> None:
    assert "responses[0].error.status: Input should be greater than or equal to 400 (got 200)" in load_error(
        tmp_path, {"responses": [{"error": {"status": 200}}]}
    )


def test_a_file_that_is_not_json_is_reported_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text('{"responses": [\n  {"content": []},,\n]}', encoding="utf-8")

    with pytest.raises(InvalidInput, match=r"script.json: not valid JSON: line 2 column"):
        Script.load(path)


def test_a_missing_script_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nowhere.json: cannot read the script"):
        Script.load(tmp_path / "nowhere.json")


def test_replay_paths_are_relative_to_the_script_file(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "basic.txt").write_bytes(b"event: ping\n")

    script = Script.load(write_script(tmp_path, {"responses": [{"replay": "streams/basic.txt"}]}))

    step = script.responses[0]
    assert isinstance(step, ReplayStep)
    assert script.replay_path(step) == tmp_path / "streams" / "basic.txt"


def test_a_replay_of_a_missing_file_is_refused_at_load(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"responses": [TEXT_STEP, {"replay": "gone.txt"}]})

    assert message.endswith(f"responses[1].replay: no such file: {tmp_path / 'gone.txt'}")


def test_model_validate_raises_pydantic_errors_for_dicts() -> None:
    with pytest.raises(ValidationError):
        Script.model_validate({"responses": [{"content": "not a list"}]})


@pytest.mark.parametrize(
    ("when_exhausted", "expected"),
    [
        ("error", [0, 1, 1, 2, None, None]),
        ("repeat_last", [0, 1, 1, 2, 2, 2]),
        ("cycle", [0, 1, 1, 2, 0, 1]),
    ],
)
def test_repeat_and_when_exhausted_decide_which_step_answers_each_turn(
    when_exhausted: str, expected: list[int | None]
) -> None:
    script = Script.model_validate(
        {"responses": [TEXT_STEP, {**TEXT_STEP, "repeat": 2}, TEXT_STEP], "when_exhausted": when_exhausted}
    )

    picked = [script.step_for(turn) for turn in range(6)]

    assert [None if pick is None else pick[0] for pick in picked] == expected
    assert script.length == 4


def test_text_is_cut_into_deltas_of_a_few_words_that_join_back_exactly() -> None:
    text = "Hello there!  I will run\nthe tests now. "

    chunks = text_chunks(text, 2)

    assert chunks == ["Hello there!", "  I will", " run\nthe", " tests now.", " "]
    assert "".join(chunks) == text
    assert text_chunks("", 3) == []


def test_tool_input_json_is_cut_mid_token_and_joins_back() -> None:
    value = {"command": "pytest -q", "timeout_s": 30}

    chunks = json_chunks(value, 7)

    assert chunks[0] == ""
    assert "".join(chunks) == json.dumps(value)
    assert len(chunks) > 4
    assert all(len(chunk) <= 7 for chunk in chunks)


DOCS = Path(__file__).parents[2] / "docs" / "scripted-model.md"


def test_the_documented_example_is_a_valid_script() -> None:
    example = DOCS.read_text(encoding="utf-8").split("### A complete example", 1)[1]
    data = json.loads(example.split("```json", 1)[1].split("```", 1)[0])

    script = Script.model_validate(data)

    assert [type(step).__name__ for step in script.responses] == [
        "ErrorStep", "MessageStep", "ErrorStep", "MessageStep", "ReplayStep", "MessageStep",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "model", [Script, MessageStep, ErrorStep, ReplayStep, ErrorSpec, Usage, ToolUseBlock]
)
def test_every_script_key_is_documented(model: type[BaseModel]) -> None:
    documented = DOCS.read_text(encoding="utf-8")

    assert [key for key in model.model_fields if f"`{key}`" not in documented] == []


def test_a_tool_input_is_an_object_or_a_freeform_string(tmp_path: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: a.py\n+print(1)\n*** End Patch\n"
    step = {"content": [{"type": "tool_use", "name": "apply_patch", "input": patch}]}
    script = Script.load(write_script(tmp_path, {"responses": [step]}))
    block = script.responses[0].content[0]  # type: ignore[union-attr]
    assert isinstance(block, ToolUseBlock)
    assert block.input == patch

    refused = load_error(
        tmp_path, {"responses": [{"content": [{"type": "tool_use", "name": "x", "input": 3}]}]}
    )
    assert "responses[0].content[0].input" in refused


@pytest.mark.parametrize(
    ("directory", "script"),
    [(harness, path) for harness in ("claude-code", "codex", "opencode") for path in ["write-and-run"]]
    + [("claude-code", "auth-401"), ("codex", "auth-401")],
)
def test_the_harness_fixture_scripts_load(directory: str, script: str) -> None:
    path = Path(__file__).parents[1] / "fixtures" / "harnesses" / directory / f"{script}.script.json"
    assert Script.load(path).length >= 1


def test_a_variant_needs_a_condition_and_a_name_of_its_own(tmp_path: Path) -> None:
    bare = {"responses": [TEXT_STEP], "variants": [{"name": "x", "when": {}, "responses": [TEXT_STEP]}]}
    twice = {
        "responses": [TEXT_STEP],
        "variants": [
            {"name": "x", "when": {"offers_tool": "Bash"}, "responses": [TEXT_STEP]},
            {"name": "x", "when": {"prompt_contains": "planner"}, "responses": [TEXT_STEP]},
        ],
    }

    assert "needs prompt_contains, offers_tool or both" in load_error(tmp_path, bare)
    assert "x is used more than once" in load_error(tmp_path, twice)


def test_a_variant_matches_on_the_prompt_and_the_tools_the_request_offers() -> None:
    script = Script.model_validate(
        {
            "responses": [TEXT_STEP],
            "variants": [
                {"name": "claude", "when": {"offers_tool": "Bash", "prompt_contains": "builder"},
                 "responses": [TEXT_STEP]},
                {"name": "planner", "when": {"prompt_contains": "You are the planner"},
                 "responses": [TEXT_STEP]},
            ],
        }
    )  # fmt: skip
    bash = [{"name": "Bash", "input_schema": {}}]
    planner = [{"type": "text", "text": "You are the planner. Study the workspace."}]
    first_user = [{"role": "user", "content": [{"type": "text", "text": "You are a builder."}]}]

    def picked(body: dict[str, Any]) -> str | None:
        variant = script.variant_for(body)
        return variant.name if variant is not None else None

    assert picked({"system": planner, "messages": []}) == "planner"
    assert picked({"tools": bash, "messages": first_user}) == "claude"
    assert picked({"tools": bash, "messages": [{"role": "user", "content": "fix it"}]}) is None
    assert picked({"instructions": "You are the planner.", "input": "go"}) == "planner"
    assert picked({"messages": first_user}) is None
