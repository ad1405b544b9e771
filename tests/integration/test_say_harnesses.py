"""``raas say`` through Claude Code (issue #25, Tests: "reaches the next model call's messages ...
for the api harness and for Claude Code"). The real CLI (the pinned binary of the harness cache)
runs in the iteration's container through the worker's gateway against the scripted model; a
CLI harness has no turn boundary of ours inside its run, so what a person says while an iteration
runs is the next iteration's first message — asserted on the scripted model's request log — and is
kept in the transcript and the timeline as a person's.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from orchestrator.scheduling import talk
from shared import events
from shared.models import ProjectStatus
from tests.support.engine import Engine, engine
from tests.support.records import event_log, iterations, messages, project

pytestmark = [pytest.mark.integration, pytest.mark.docker]

RAAS_TOML = 'harness = "claude-code"\ncompletion_marker = "TASK COMPLETE"\n'
WORDS = "use tabs, not spaces"
HEARD = f"A person (alice) says to you:\n> {WORDS}"


def _text(words: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": words}]}


SCRIPT = {
    "responses": [
        # the first iteration: a write that runs a moment, then its turn ends, not complete
        {
            "content": [
                {"type": "tool_use", "name": "Bash", "input": {"command": "sleep 3; echo one > one.txt"}}
            ]
        },
        _text("One file written; more next time."),
        # the second iteration
        _text("TASK COMPLETE"),
    ],
    "when_exhausted": "repeat_last",
}


def _model_calls(eng: Engine, project_id: str) -> list[Any]:
    """The harness's own Messages API calls (no token counts, no side requests)."""
    return [r for r in eng.requests(project_id) if r.path == "/v1/messages" and r.side_request is None]


def _said_while_the_first_call_runs(eng: Engine, project_id: str) -> threading.Thread:
    def speak() -> None:
        deadline = time.monotonic() + 60
        while not _model_calls(eng, project_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        talk.say_to(
            project_id,
            WORDS,
            author="alice",
            agent_id=None,
            now=False,
            dispatcher=eng.dispatcher,
            bus=eng.bus,
        )

    thread = threading.Thread(target=speak)
    thread.start()
    return thread


def test_said_to_claude_code_reaches_its_next_iterations_first_model_call(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine(SCRIPT, tmp_path, anthropic_api_key=SecretStr("sk-ant-say-test-key-0123456789")) as eng:
        project_id = eng.submit(prompt="Write one.txt, then finish.", raas_toml=RAAS_TOML)
        # Given Claude Code's first iteration, and a person speaking while its first call's tool runs
        speaking = _said_while_the_first_call_runs(eng, project_id)
        eng.run_next(project_id)
        speaking.join(60)
        first = iterations(project_id)[0]
        assert not first.completed_task, first.error
        calls_of_first = len(_model_calls(eng, project_id))
        assert calls_of_first == 2
        # When the next iteration runs
        eng.run_next(project_id)
        # Then the words were in no call of the first iteration, and in the second's first call,
        # quoted as a person's, in its first user message
        calls = _model_calls(eng, project_id)
        assert not any(WORDS in str(c.body["messages"]) for c in calls[:calls_of_first])
        opening = calls[calls_of_first].body["messages"][0]
        assert opening["role"] == "user"
        assert HEARD in str(opening["content"]).replace("\\n", "\n")
        assert project(project_id).status is ProjectStatus.COMPLETED
        # And the timeline shows it once, from the person; the transcript keeps it
        [said] = event_log(project_id, events.PERSON_SAID)
        assert (said.data["author"], said.data["text"]) == ("alice", WORDS)
        assert any(WORDS in str(m.content) for m in messages(project_id) if m.role == "user")
