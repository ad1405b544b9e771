"""``raas say``: what a person says reaches the agent at its next turn boundary (issue #25, point 3).

The api harness: a message said while the first model call's tool runs is in the next request's
messages (the scripted model's request log), marked as a person's words, in the transcript and
in the timeline as ``person_said``. Said before an iteration starts, it is in the first message,
which is what a CLI harness is given too. Said to a finished project: one line, non-zero, nothing
written.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.scheduling import talk
from shared import events
from shared.db import session_scope
from shared.models import PersonMessage
from tests.support.engine import cli_env, engine
from tests.support.records import bodies, event_log, messages, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.usefixtures("services")]

COMPLETE = tool("task_complete", {"summary": "done"})


def _say(eng: object, project_id: str, words: str) -> None:
    talk.say_to(
        project_id,
        words,
        author="alice",
        agent_id=None,
        now=False,
        dispatcher=eng.dispatcher,
        bus=eng.bus,  # type: ignore[attr-defined]
    )


def _user_texts(message: dict[str, object]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))  # type: ignore[union-attr]


def test_said_while_a_tool_runs_reaches_the_next_model_call(tmp_path: Path) -> None:
    script = {"responses": [tool("bash", {"command": "sleep 2"}), COMPLETE]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        # Given the first call's tool running (its request is logged)
        said = threading.Thread(
            target=lambda: (_wait_for_request(eng, project_id), _say(eng, project_id, "use tabs"))
        )
        said.start()
        # When the iteration runs on
        eng.run_next(project_id)
        said.join(30)
        # Then the second request ends with the person's words, and the first did not hold them
        first, second = bodies(eng, project_id)[:2]
        assert "use tabs" not in str(first["messages"])
        assert "A person (alice) says to you:\n> use tabs" in _user_texts(second["messages"][-1])
        assert [e.data["text"] for e in event_log(project_id, events.PERSON_SAID)] == ["use tabs"]
        kept = [m for m in messages(project_id) if "use tabs" in str(m.content)]
        assert len(kept) == 1
        assert kept[0].role == "user"


def _wait_for_request(eng: object, project_id: str) -> None:
    deadline = time.monotonic() + 30
    while not eng.requests(project_id) and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.05)


def test_said_before_an_iteration_is_in_its_first_message(tmp_path: Path) -> None:
    script = {"responses": [tool("bash", {"command": "true"}), tool("bash", {"command": "true"}), COMPLETE]}
    toml = "max_turns = 1\n"
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)
        _say(eng, project_id, "the tests live in t/")
        eng.run_next(project_id)
        opening = bodies(eng, project_id)[1]["messages"][0]
        assert "A person (alice) says to you:\n> the tests live in t/" in _user_texts(opening)


def test_say_to_a_finished_project_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    with engine({"responses": [COMPLETE]}, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_to_end(project_id)
        with cli_env(eng):
            result = CliRunner().invoke(app, ["say", project_id, "hello"])
        assert result.exit_code != 0
        # main() prints the error as one line; through the app it is the exception it maps
        assert "has ended (completed)" in str(result.exception)
        assert "\n" not in str(result.exception)
        with session_scope() as session:
            assert (
                session.scalar(
                    select(func.count())
                    .select_from(PersonMessage)
                    .where(PersonMessage.project_id == project_id)
                )
                == 0
            )
        assert event_log(project_id, events.PERSON_SAID) == []
