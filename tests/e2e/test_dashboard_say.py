"""Saying something to a project's agent from its dashboard page (issue #25 point 3: "and the
dashboard"), in Debian's Chromium: the words reach the agent's next model call, as `raas say`'s
do, and the box is disabled once the project has ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from shared import events
from shared.settings import get_settings
from tests.support.dashboard import dashboard_engine, submit
from tests.support.records import bodies, event_log, tool

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

SCRIPT = {
    "responses": [
        tool("bash", {"command": "true"}),
        tool("task_complete", {"summary": "done"}),
    ],
}
WORDS = "the tests live in t/"


def _user_texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))


def test_said_from_the_page_is_in_the_agents_next_call_and_an_ended_project_takes_nothing(
    services: dict[str, str], tmp_path: Path, browser: Browser
) -> None:
    with dashboard_engine(SCRIPT, tmp_path) as (eng, server):
        # Given a project whose first iteration has run (one turn each)
        project_id = submit(eng, "max_turns = 1\n", None)
        eng.run_next(project_id)
        page = browser.new_page()
        page.goto(server.url + "/login")
        page.fill("#token", get_settings().api_token.get_secret_value())
        page.click("#sign-in")
        page.goto(f"{server.url}/projects/{project_id}")
        # When the user says something to its agent from the page
        page.fill("#say-input", WORDS)
        page.click("#action-say")
        expect(page.locator("#msg-say")).to_contain_text("said; the agent reads it at its next turn")
        # Then the agent's next iteration opens with the words, as a person's
        eng.run_next(project_id)
        opening = bodies(eng, project_id)[1]["messages"][0]
        assert f"says to you:\n> {WORDS}" in _user_texts(opening)
        assert [e.data["text"] for e in event_log(project_id, events.PERSON_SAID)] == [WORDS]
        # And once the project has ended, the box takes nothing
        while eng.dispatcher.pending(project_id):
            eng.run_next(project_id)
        expect(page.locator("#project-status")).to_have_text("completed")
        expect(page.locator("#action-say")).to_be_disabled()
        expect(page.locator("#say-input")).to_be_disabled()
        page.close()
