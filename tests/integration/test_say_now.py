"""``raas say --now`` (issue #25 point 3): it ends the agent's current turn after the tool call in
flight. The built-in loop checks between the tool calls of one reply: once a ``--now`` message
waits, the calls after the one running are not run (each gets a result saying so), and the
person's words go in before the next model call — asserted on the scripted model's request log.
Said without ``--now``, the same reply's calls all run. The in-process engine, a real sandbox.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.scheduling import talk
from shared import events
from tests.support.engine import Engine, engine
from tests.support.records import bodies, event_log, tool, tool_results

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.usefixtures("services")]

# One reply, three tool calls: the first runs a moment, so a person can speak while it does.
THREE_CALLS = {
    "content": [
        {"type": "tool_use", "id": "toolu_sleep", "name": "bash", "input": {"command": "sleep 3"}},
        {"type": "tool_use", "id": "toolu_a", "name": "write", "input": {"path": "a.txt", "content": "a\n"}},
        {"type": "tool_use", "id": "toolu_b", "name": "write", "input": {"path": "b.txt", "content": "b\n"}},
    ]
}
SCRIPT = {"responses": [THREE_CALLS, tool("task_complete", {"summary": "done"})]}


def _say_once_the_first_call_is_answered(eng: Engine, project_id: str, *, now: bool) -> threading.Thread:
    def speak() -> None:
        deadline = time.monotonic() + 30
        while not eng.requests(project_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the reply is streamed and its first tool call (sleep 3) is running
        talk.say_to(
            project_id,
            "stop: write b only",
            author="alice",
            agent_id=None,
            now=now,
            dispatcher=eng.dispatcher,
            bus=eng.bus,
        )

    thread = threading.Thread(target=speak)
    thread.start()
    return thread


def _second_request(eng: Engine, project_id: str) -> dict[str, Any]:
    return bodies(eng, project_id)[1]["messages"][-1]


def test_say_now_ends_the_turn_after_the_tool_call_in_flight(tmp_path: Path) -> None:
    with engine(SCRIPT, tmp_path) as eng:
        project_id = eng.submit()
        # Given the first of three tool calls running, a person says something --now
        speaking = _say_once_the_first_call_is_answered(eng, project_id, now=True)
        eng.run_next(project_id)
        speaking.join(30)
        # Then the call in flight finished, the other two were not run, each told why
        told = _second_request(eng, project_id)
        results = {r["tool_use_id"]: r for r in tool_results(told)}
        assert list(results) == ["toolu_sleep", "toolu_a", "toolu_b"]
        assert not results["toolu_sleep"].get("is_error")
        for left in ("toolu_a", "toolu_b"):
            assert results[left]["is_error"] is True
            assert "a person interrupted your turn" in str(results[left]["content"])
        assert [e.data["tool"] for e in event_log(project_id, events.AGENT_TOOL_CALL)][:1] == ["bash"]
        assert "write" not in [e.data["tool"] for e in event_log(project_id, events.AGENT_TOOL_CALL)]
        # And the person's words are in that next model call's messages, after the results
        last = told["content"][-1]
        assert last["type"] == "text"
        assert "A person (alice) says to you:\n> stop: write b only" in last["text"]


def test_said_without_now_lets_the_turn_finish(tmp_path: Path) -> None:
    with engine(SCRIPT, tmp_path) as eng:
        project_id = eng.submit()
        speaking = _say_once_the_first_call_is_answered(eng, project_id, now=False)
        eng.run_next(project_id)
        speaking.join(30)
        told = _second_request(eng, project_id)
        results = tool_results(told)
        assert [r["tool_use_id"] for r in results] == ["toolu_sleep", "toolu_a", "toolu_b"]
        assert not any(r.get("is_error") for r in results)
        assert "A person (alice) says to you:\n> stop: write b only" in told["content"][-1]["text"]
