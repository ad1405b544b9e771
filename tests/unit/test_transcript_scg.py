"""The scg transcript format: what is written reads back as the same transcript, whatever it
holds; what does not parse is refused with the file and line; replay keeps the timing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.transcripts import scg
from orchestrator.transcripts.files import read_transcript
from orchestrator.transcripts.model import (
    AgentMail,
    MemoryWrite,
    Metrics,
    ProjectInfo,
    RawBlock,
    Subagent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    TranscriptAgent,
    TranscriptMessage,
)
from orchestrator.transcripts.render import replay, to_markdown
from orchestrator.transcripts.scg import parse, write
from shared.errors import InvalidInput, NotFound, ScgError
from shared.models import AgentStatus, ProjectStatus
from shared.usage import Usage

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
# Strings that look like the format's own syntax.
TRICKY = [
    "\\u0041",
    "# comment",
    "",
    "~",
    "^",
    "^0",
    "=",
    "|",
    "\\",
    "\n",
    "\\n",
    "a|b\\c\r\n",
    "#END",
    "@metrics",
    " x ",
    "\u2028\x85\x00",
]

texts = st.one_of(st.text(), st.sampled_from(TRICKY))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
counts = st.integers(min_value=0, max_value=10**9)
money = st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False, allow_infinity=False)
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def blocks(draw: st.DrawFn, previous_calls: list[str]) -> Any:
    kind = draw(st.sampled_from(["text", "tool_use", "tool_result", "raw"]))
    if kind == "text":
        return TextBlock(text=draw(texts))
    if kind == "tool_use":
        return ToolUseBlock(id=draw(texts), name=draw(texts), input=draw(json_objects))
    if kind == "tool_result":
        # Results usually answer a call of the message before (written as ^k), sometimes not.
        call = draw(st.sampled_from(previous_calls) | texts) if previous_calls else draw(texts)
        return ToolResultBlock(tool_use_id=call, content=draw(texts), is_error=draw(st.booleans()))
    return RawBlock(data=draw(json_objects))


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    model = draw(st.none() | texts)
    ids = draw(st.lists(texts, min_size=1, max_size=4, unique=True))
    agents = [
        TranscriptAgent(
            id=agent_id,
            category=draw(texts),
            depth=draw(st.integers(0, 3)),
            parent=draw(st.none() | st.sampled_from(ids) | texts),
            status=draw(st.sampled_from(AgentStatus)),
            task=draw(st.none() | texts),
            iterations=draw(counts),
            failed_iterations=draw(counts),
        )
        for agent_id in ids
    ]
    created = draw(times)
    messages: list[TranscriptMessage] = []
    previous_calls: list[str] = []
    seq = 0
    for _ in range(draw(st.integers(0, 6))):
        seq += draw(st.integers(1, 3))
        assistant = draw(st.booleans())
        content = [draw(blocks(previous_calls)) for _ in range(draw(st.integers(0, 4)))]
        messages.append(
            TranscriptMessage(
                seq=seq,
                agent=draw(st.sampled_from(ids)),
                iteration=draw(st.integers(0, 50)),
                attempt=draw(st.integers(1, 3)),
                role="assistant" if assistant else "user",
                created_at=created + timedelta(microseconds=draw(st.integers(-(10**9), 10**12))),
                content=content,
                model=draw(st.sampled_from([model]) | st.none() | texts),
                stop_reason=draw(st.none() | texts),
                usage=draw(st.none() | st.builds(Usage, **dict.fromkeys(Usage.model_fields, counts))),
                cost_usd=draw(money),
                duration_s=draw(st.none() | seconds),
            )
        )
        previous_calls = [b.id for b in content if isinstance(b, ToolUseBlock)]
    return Transcript(
        project=ProjectInfo(
            id=draw(texts),
            name=draw(texts),
            status=draw(st.sampled_from(ProjectStatus)),
            reason=draw(st.none() | texts),
            model=model,
            created_at=created,
            started_at=draw(st.none() | times),
            finished_at=draw(st.none() | times),
        ),
        agents=agents,
        messages=messages,
        subagents=[
            Subagent(
                agent=draw(st.sampled_from(ids)),
                iteration=draw(st.none() | st.integers(0, 50)),
                prompt=draw(st.none() | texts),
                report=draw(st.none() | texts),
            )
            for _ in range(draw(st.integers(0, 2)))
        ],
        memory=[
            MemoryWrite(
                agent=draw(st.sampled_from(ids)),
                iteration=draw(st.integers(0, 50)),
                created_at=created + timedelta(microseconds=draw(st.integers(-(10**9), 10**12))),
                key=draw(texts),
                version=draw(st.integers(1, 10**6)),
                conflict=draw(st.booleans()),
                tags=draw(st.lists(texts, max_size=3)),
                value=draw(texts),
            )
            for _ in range(draw(st.integers(0, 3)))
        ],
        mail=[
            AgentMail(
                agent=draw(st.sampled_from(ids) | texts),  # a received message's sender may be outside
                iteration=draw(st.integers(0, 50)),
                created_at=created + timedelta(microseconds=draw(st.integers(-(10**9), 10**12))),
                to=draw(st.lists(st.sampled_from(ids) | texts, max_size=3)),
                broadcast=draw(st.booleans()),
                text=draw(texts),
            )
            for _ in range(draw(st.integers(0, 3)))
        ],
        metrics=draw(
            st.builds(
                Metrics,
                messages=counts,
                tool_calls=counts,
                input_tokens=counts,
                cost_usd=money,
                llm_s=seconds,
                duration_s=st.none() | seconds,
            )
        ),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts())
def test_any_transcript_written_as_scg_reads_back_as_the_same_transcript(transcript: Transcript) -> None:
    text = write(transcript)
    back = parse(text)
    assert back == transcript
    assert back.model_dump(mode="json") == transcript.model_dump(mode="json")
    # One line per agent, message, memory write, message between agents and metric: no payload can
    # break a line. @memory and @mail (a section line and a legend) only when there are any.
    optional = sum(2 + len(items) for items in (transcript.memory, transcript.mail) if items)
    assert (
        len(text.splitlines())
        == 10
        + len(transcript.agents)
        + len(transcript.messages)
        + len(transcript.subagents)
        + len(Metrics.model_fields)
        + optional
    )


@settings(max_examples=100, deadline=None)
@given(transcripts())
def test_the_json_format_reads_back_as_the_same_transcript(transcript: Transcript) -> None:
    assert Transcript.model_validate_json(transcript.model_dump_json()) == transcript


def _sample() -> Transcript:
    return Transcript(
        project=ProjectInfo(
            id="p1", name="hello world", status=ProjectStatus.COMPLETED, model="m", created_at=T0
        ),
        agents=[
            TranscriptAgent(
                id="root1", category="builder", depth=0, status=AgentStatus.COMPLETED, iterations=1
            ),
            TranscriptAgent(
                id="sub1", category="searcher", depth=1, parent="root1", status=AgentStatus.COMPLETED
            ),
        ],
        messages=[
            TranscriptMessage(
                seq=1, agent="root1", iteration=1, role="user", created_at=T0, content=[TextBlock(text="go")]
            ),
            TranscriptMessage(
                seq=2,
                agent="root1",
                iteration=1,
                role="assistant",
                created_at=T0 + timedelta(seconds=2),
                model="m",
                usage=Usage(input_tokens=100, output_tokens=10),
                cost_usd=Decimal("0.0012"),
                content=[ToolUseBlock(id="toolu_1", name="bash", input={"command": "ls | wc -l"})],
            ),
            TranscriptMessage(
                seq=3,
                agent="root1",
                iteration=1,
                role="user",
                created_at=T0 + timedelta(seconds=5),
                content=[ToolResultBlock(tool_use_id="toolu_1", content="3\n", is_error=False)],
            ),
            TranscriptMessage(
                seq=4,
                agent="sub1",
                iteration=1,
                role="user",
                created_at=T0 + timedelta(seconds=6),
                content=[TextBlock(text="search")],
            ),
        ],
        subagents=[Subagent(agent="sub1", iteration=1, prompt="find it", report="found it")],
        metrics=Metrics(messages=4, tool_calls=1, input_tokens=100, output_tokens=10),
    )


def test_a_result_names_the_call_it_answers_by_position_and_the_model_by_the_header() -> None:
    lines = write(_sample()).splitlines()
    call = next(line for line in lines if line.startswith("2|"))
    result = next(line for line in lines if line.startswith("3|"))
    assert call.split("|")[6] == "="
    assert "|U|toolu_1|bash|" in call
    assert '"ls \\| wc -l"' in call
    assert result.endswith("|R|^0|0|3\\n")


def test_the_scg_of_a_transcript_is_several_times_smaller_than_its_json() -> None:
    size = scg.sizes(_sample())
    assert size["scg"] * 2 < size["json"]
    assert size["scg"] < size["json_compact"]


def _corrupt(tmp_path: Path, transform: Any) -> Path:
    lines = write(_sample()).splitlines()
    path = tmp_path / "bad.scg"
    path.write_text("\n".join(transform(lines)) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("transform", "line", "fragment"),
    [
        (lambda ls: [ls[0].replace("v1", "v9"), *ls[1:]], 1, "#TRANSCRIPT v1"),
        (lambda ls: [ls[0].replace("status=completed", "status=done"), *ls[1:]], 1, "'done'"),
        (lambda ls: [line.replace("|U|", "|Q|") for line in ls], 9, "not a block tag"),
        (lambda ls: [line.replace("|R|^0|", "|R|^3|") for line in ls], 10, "refers to tool call 3"),
        (lambda ls: [line.replace("ls \\| wc", "ls | wc") for line in ls], 9, "tool input is not JSON"),
        (lambda ls: [line.replace("0.0012", "0.00x12") for line in ls], 9, "not an amount"),
        (lambda ls: [line.replace("|u|0|", "|u|7|", 1) for line in ls], 8, "not in @agents"),
        (lambda ls: [line.replace("2|2|a|", "1|2|a|") for line in ls], 9, "numbers must increase"),
        (lambda ls: [line.replace("tool_calls=1", "tool_calls=x") for line in ls], 20, "whole number"),
        (lambda ls: [line for line in ls if line != "@subagents"], 13, "11 cells"),
        (lambda ls: ls[:12], 12, "cut short"),
        (lambda ls: [*ls, "more"], 30, "after #END"),
    ],
)
def test_a_file_that_does_not_parse_is_refused_with_its_line(
    tmp_path: Path, transform: Any, line: int, fragment: str
) -> None:
    path = _corrupt(tmp_path, transform)
    with pytest.raises(ScgError) as caught:
        read_transcript(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message
    assert "\n" not in message


# A transcript as written before the memory bank (no @memory, no @mail).
OLD_FILE = """#TRANSCRIPT v1 project=p1 name=old status=completed reason=~ model=m \
created=2025-03-01T12:00:00+00:00 started=~ finished=~
@agents
# i|id|category|depth|parent|status|task|iterations|failed_iterations
0|root1|builder|0|~|completed|~|1|0
@messages
1|0|u|0|1|1|~|~|~|0|~|T|go
@subagents
@metrics
messages=1
iterations=1
failed_iterations=0
tool_calls=0
tool_errors=0
input_tokens=0
output_tokens=0
cache_write_tokens=0
cache_read_tokens=0
cost_usd=0
llm_s=0.0
duration_s=~
#END
"""


def test_a_file_written_before_the_memory_bank_still_reads_and_writes_back_the_same() -> None:
    old = parse(OLD_FILE)
    assert (old.memory, old.mail, [m.seq for m in old.messages]) == ([], [], [1])
    assert "@memory" not in write(old)
    assert parse(write(old)) == old


def _with_memory() -> Transcript:
    sample = _sample()
    sample.memory = [
        MemoryWrite(
            agent="sub1",
            iteration=1,
            created_at=T0 + timedelta(seconds=3),
            key="plan",
            version=2,
            conflict=True,
            tags=["storage"],
            value="use | postgres\n",
        )
    ]
    sample.mail = [
        AgentMail(agent="sub1", iteration=1, created_at=T0 + timedelta(seconds=4), to=["root1"], text="hi")
    ]
    return sample


def test_memory_writes_and_messages_between_agents_are_written_read_shown_and_replayed_in_place() -> None:
    sample = _with_memory()
    text = write(sample)
    assert "@memory\n# t|agent|iteration|key|version|conflict|tags|value\n3|1|1|plan|2|1|" in text
    assert '|["storage"]|use \\| postgres\\n\n@mail\n' in text
    assert '\n4|sub1|1|0|["root1"]|hi\n@metrics\n' in text
    assert parse(text) == sample
    md = to_markdown(sample)
    assert "## Memory" in md
    assert "## Messages between agents" in md
    shown: list[str] = []
    replay(sample, 1.0, lambda item: shown.append(type(item).__name__), sleep=lambda s: None)
    assert shown == [
        "TranscriptMessage",
        "TranscriptMessage",
        "MemoryWrite",
        "AgentMail",
        "TranscriptMessage",
        "TranscriptMessage",
    ]
    # One agent's transcript keeps its writes, what it sent and what it was sent.
    root = sample.for_agent("root")
    assert (len(root.memory), len(root.mail)) == (1, 1)
    assert parse(write(root)) == root


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("|plan|2|1|", "|plan|2|7|", "conflict flag '7' is not 0 or 1"),
        ('|["storage"]|', '|{"a":1}|', "tags is not a JSON list of strings"),
        ('|["root1"]|', "|root1|", "to is not JSON"),
        ("@subagents\n", "@mail\n", "expected @subagents here"),
    ],
)
def test_a_bad_memory_or_mail_line_is_refused_with_its_line(old: str, new: str, fragment: str) -> None:
    text = write(_with_memory()).replace(old, new, 1)
    with pytest.raises(ScgError, match=fragment):
        parse(text)


def test_a_file_that_is_neither_scg_nor_transcript_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"project": {}}), encoding="utf-8")
    with pytest.raises(InvalidInput, match="not a transcript"):
        read_transcript(path)


def test_an_agents_transcript_has_its_own_messages_and_the_agents_it_spawned() -> None:
    sample = _sample()
    root = sample.for_agent("root")
    assert [m.seq for m in root.messages] == [1, 2, 3]
    assert [a.id for a in root.agents] == ["root1", "sub1"]
    assert root.metrics.tool_calls == 1
    assert root.metrics.cost_usd == Decimal("0.0012")
    assert root.metrics.duration_s == 5.0
    sub = sample.for_agent("sub")
    assert [m.seq for m in sub.messages] == [4]
    assert [s.agent for s in sub.subagents] == ["sub1"]
    assert parse(write(sub)) == sub
    with pytest.raises(NotFound, match="root1 \\(builder\\)"):
        sample.for_agent("nobody")


def test_replay_waits_the_original_gaps_divided_by_the_speed() -> None:
    waits: list[float] = []
    shown: list[int] = []
    replay(_sample(), 4.0, lambda m: shown.append(m.seq), sleep=waits.append)
    assert shown == [1, 2, 3, 4]
    assert waits == pytest.approx([0.5, 0.75, 0.25])
    capped: list[float] = []
    replay(_sample(), 1.0, lambda m: None, sleep=capped.append, max_wait_s=1.0)
    assert capped == [1.0, 1.0, 1.0]
    with pytest.raises(InvalidInput, match="--speed"):
        replay(_sample(), 0, lambda m: None, sleep=waits.append)


def test_markdown_fences_survive_backticks_in_tool_output() -> None:
    sample = _sample()
    sample.messages[2].content = [ToolResultBlock(tool_use_id="toolu_1", content="```\nx\n```")]
    md = to_markdown(sample)
    assert "````text\n```\nx\n```\n````" in md
    assert "## Subagents" in md
    assert "| cost_usd | 0 |" in md
