"""The script a scripted model server follows: which answer each request gets, in order.

A script is a JSON file validated by these pydantic models (``extra="forbid"`` everywhere, so a
misspelt key is an error, not a silently ignored option). ``docs/scripted-model.md`` is the
reference for the format; keep it in step with the fields here.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from shared.errors import InvalidInput
from shared.usage import Usage
from workers.scripted_model.sessions import offered_tools, prompt_text

StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
    "model_context_window_exceeded",
]  # fmt: skip
ErrorType = Literal[
    "invalid_request_error", "authentication_error", "billing_error", "permission_error",
    "not_found_error", "request_too_large", "rate_limit_error", "timeout_error", "api_error",
    "overloaded_error",
]  # fmt: skip

# The status the real API pairs with each error type, and the reverse for the common statuses,
# so a script may name either one.
STATUS_BY_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_TYPE_BY_STATUS = {status: type_ for type_, status in STATUS_BY_TYPE.items()}
_DEFAULT_MESSAGES = {
    "invalid_request_error": "Invalid request.",
    "authentication_error": "invalid x-api-key",
    "billing_error": "Your credit balance is too low to access the Anthropic API.",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found.",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit.",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out.",
    "overloaded_error": "Overloaded",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextBlock(_Strict):
    """A text block; streamed as several ``text_delta`` events of a few words each."""

    type: Literal["text"]
    text: str


class ToolUseBlock(_Strict):
    """A tool call; its input is streamed as ``input_json_delta`` partials cut mid-token."""

    type: Literal["tool_use"]
    name: str = Field(min_length=1)
    input: dict[str, Any] | str = Field(default_factory=dict)
    """The tool's arguments. A string is a freeform tool's input (a Responses API
    ``custom_tool_call``, e.g. Codex's ``apply_patch``); the Messages API sends it as
    ``{"input": "<the string>"}``."""
    id: str | None = None
    """Fixed tool_use id; by default a fresh ``toolu_…`` id per answer."""


ContentBlock = Annotated[TextBlock | ToolUseBlock, Field(discriminator="type")]


class _Step(_Strict):
    repeat: int = Field(default=1, ge=1)
    """Answer this many consecutive requests the same way."""
    latency_s: float = Field(default=0.0, ge=0)
    """Wait before the first byte (the status line) of the answer."""
    gather: int = Field(default=1, ge=1)
    """Hold every request that reaches this step until this many (of any sessions) have reached
    it, then answer them all (after ``latency_s``): a barrier that makes "N agents at once"
    certain instead of hoped for from timing. Held at most ``gather_timeout_s``."""
    gather_timeout_s: float = Field(default=120.0, gt=0)
    """How long a request waits for the rest of its gather (and its hold) before it is answered
    anyway."""
    hold: bool = False
    """Once gathered, hold the requests still until ``POST /_scripted/release``: the moment
    "N agents at once" lasts until a test has looked at it (at most ``gather_timeout_s``)."""
    delta_delay_s: float = Field(default=0.0, ge=0)
    """Wait between consecutive events of a streamed answer."""


class MessageStep(_Step):
    """An assistant message, answered as SSE to stream requests and as JSON otherwise."""

    content: list[ContentBlock]
    stop_reason: StopReason | None = None
    """Defaults to ``tool_use`` when a tool_use block is present, else ``end_turn``."""
    stop_sequence: str | None = None
    usage: Usage = Field(default_factory=Usage)
    """Token counts to report; each one left out is estimated (see ``docs/scripted-model.md``)."""

    @property
    def effective_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        has_tool = any(isinstance(block, ToolUseBlock) for block in self.content)
        return "tool_use" if has_tool else "end_turn"


class ErrorSpec(_Strict):
    """An Anthropic API error: give ``status``, ``type`` or both; the other is inferred."""

    status: int | None = Field(default=None, ge=400, le=599)
    type: ErrorType | None = None
    message: str | None = None
    retry_after_s: float | None = Field(default=None, ge=0)
    """Sent as the ``retry-after`` header (seconds), which the SDK honours up to 60 s."""

    @model_validator(mode="after")
    def _status_or_type(self) -> ErrorSpec:
        if self.status is None and self.type is None:
            msg = "give the HTTP status, the error type, or both"
            raise ValueError(msg)
        return self

    @property
    def http_status(self) -> int:
        return self.status if self.status is not None else STATUS_BY_TYPE[self.error_type]

    @property
    def error_type(self) -> str:
        if self.type is not None:
            return self.type
        assert self.status is not None  # the validator guarantees one of the two
        return _TYPE_BY_STATUS.get(
            self.status, "api_error" if self.status >= 500 else "invalid_request_error"
        )

    @property
    def error_message(self) -> str:
        return self.message if self.message is not None else _DEFAULT_MESSAGES[self.error_type]


class ErrorStep(_Step):
    """An error: an HTTP error status, or (``mid_stream``) an ``error`` event after a 200."""

    error: ErrorSpec
    mid_stream: bool = False
    partial_text: str = "Let me start by looking at"
    """Text streamed before a mid-stream error, so the client has begun a message."""


class ReplayStep(_Step):
    """A recorded SSE body sent verbatim; answers stream requests only."""

    replay: str = Field(min_length=1)
    """Path of the recorded stream, relative to the script file."""


def _step_kind(value: Any) -> str | None:
    # Which key a step carries decides its kind, so errors name the fields of the intended kind.
    if isinstance(value, MessageStep | ErrorStep | ReplayStep):
        return {MessageStep: "message", ErrorStep: "error", ReplayStep: "replay"}[type(value)]
    if isinstance(value, dict):
        for key, kind in (("replay", "replay"), ("error", "error"), ("content", "message")):
            if key in value:
                return kind
    return None


Step = Annotated[
    Annotated[MessageStep, Tag("message")] | Annotated[ErrorStep, Tag("error")]
    | Annotated[ReplayStep, Tag("replay")],
    Discriminator(
        _step_kind,
        custom_error_type="step_kind",
        custom_error_message='a step needs "content" (a message), "error" or "replay"',
    ),
]  # fmt: skip
_UNION_TAGS = {"message", "error", "replay", "text", "tool_use"}


class _Walk(_Strict):
    """Steps walked in order, separately per session."""

    responses: list[Step] = Field(min_length=1)
    when_exhausted: Literal["error", "repeat_last", "cycle"] = "error"
    """After the last step: answer HTTP 500, repeat the last step, or start again."""

    _ends: list[int] = PrivateAttr(default_factory=list)

    def model_post_init(self, context: Any, /) -> None:
        total = 0
        for step in self.responses:
            total += step.repeat
            self._ends.append(total)

    @property
    def length(self) -> int:
        """Requests one walk through the steps answers, counting each step's ``repeat``."""
        return self._ends[-1]

    def step_for(self, turn: int) -> tuple[int, Step] | None:
        """The step (and its index in ``responses``) that answers a session's ``turn``-th
        request (0-based), or None when the steps are exhausted and ``when_exhausted`` is error."""
        if turn >= self.length:
            if self.when_exhausted == "error":
                return None
            turn = self.length - 1 if self.when_exhausted == "repeat_last" else turn % self.length
        index = bisect_right(self._ends, turn)
        return index, self.responses[index]


class Match(_Strict):
    """Which requests a variant answers: every condition given must hold."""

    prompt_contains: str | None = Field(default=None, min_length=1)
    """A substring of the request's system prompt (Messages ``system``, Responses
    ``instructions``) or of its first user message: an agent's role."""
    offers_tool: str | None = Field(default=None, min_length=1)
    """The name of a tool the request offers: which agent CLI is asking."""

    @model_validator(mode="after")
    def _something(self) -> Match:
        if self.prompt_contains is None and self.offers_tool is None:
            msg = "a variant's when needs prompt_contains, offers_tool or both"
            raise ValueError(msg)
        return self

    def matches(self, body: Any) -> bool:
        if self.prompt_contains is not None and self.prompt_contains not in prompt_text(body):
            return False
        return self.offers_tool is None or self.offers_tool in offered_tools(body)


class Variant(_Walk):
    """Steps of their own for the requests ``when`` matches, with a cursor of their own per
    session: the agents of one project (a builder, its reviewer, a planner) or the different agent
    CLIs of a mixed load each walk the steps written for them."""

    name: str = Field(min_length=1)
    when: Match


class Script(_Walk):
    """The answers a scripted model server gives, walked in order separately per session."""

    variants: list[Variant] = Field(default_factory=list)
    """Tried in order; a request none matches walks ``responses``."""
    text_chunk_words: int = Field(default=3, ge=1)
    """Words per ``text_delta`` event."""
    json_chunk_chars: int = Field(default=12, ge=1)
    """Characters of tool-input JSON per ``input_json_delta`` event."""

    _base_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _names_once(self) -> Script:
        names = [variant.name for variant in self.variants]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            msg = f"variant names must differ: {', '.join(twice)} is used more than once"
            raise ValueError(msg)
        return self

    @classmethod
    def load(cls, path: Path) -> Script:
        """Read and validate a script file; replay paths are resolved against its directory.

        Raises:
            InvalidInput: the file is missing or not JSON, a key is unknown or a value is wrong
                (each problem on its own line: ``script.json: responses[2].stop_reason: ...``),
                or a replayed file does not exist.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            msg = f"{path}: cannot read the script: {exc.strerror or exc}"
            raise InvalidInput(msg) from exc
        except json.JSONDecodeError as exc:
            msg = f"{path}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
            raise InvalidInput(msg) from exc
        try:
            script = cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidInput(describe_errors(str(path), exc)) from exc
        script._base_dir = path.resolve().parent
        walks = [("", script), *((f"variants[{i}].", v) for i, v in enumerate(script.variants))]
        for where, walk in walks:
            for index, step in enumerate(walk.responses):
                replayed = script.replay_path(step) if isinstance(step, ReplayStep) else None
                if replayed is not None and not replayed.is_file():
                    msg = f"{path}: {where}responses[{index}].replay: no such file: {replayed}"
                    raise InvalidInput(msg)
        return script

    def replay_path(self, step: ReplayStep) -> Path:
        """Where a replay step's file is: relative to the script file (or the working directory
        for a script built with ``model_validate``)."""
        return (self._base_dir or Path.cwd()) / step.replay

    def variant_for(self, body: Any) -> Variant | None:
        """The first variant whose ``when`` the request matches; None: the script's own steps."""
        return next((variant for variant in self.variants if variant.when.matches(body)), None)


def describe_errors(source: str, exc: ValidationError) -> str:
    """One line per problem, naming the key as a path a person can find in the file."""
    return "\n".join(f"{source}: {_location(error)}: {_reason(error)}" for error in exc.errors())


def _location(error: ErrorDetails) -> str:
    text = ""
    previous: Any = None
    for part in error["loc"]:
        if isinstance(part, int):
            text += f"[{part}]"
        # The tag pydantic adds after a list index for a union member is not a key in the file.
        elif not (isinstance(previous, int) and part in _UNION_TAGS):
            text += f".{part}" if text else str(part)
        previous = part
    return text or "(top level)"


def _reason(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key is missing"
    reason = error["msg"].removeprefix("Value error, ")
    if error["type"] == "step_kind" and isinstance(error["input"], dict):
        reason += f" (got keys: {', '.join(map(str, error['input'])) or 'none'})"
    elif isinstance(error["input"], str | int | float | bool):
        reason += f" (got {json.dumps(error['input'])})"
    return reason
