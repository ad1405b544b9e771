"""What an iteration's context is made of: fresh by default, carried over with ``continue``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.db import session_scope
from shared.models import Project
from tests.support.engine import engine
from tests.support.records import bodies, opening_text, text, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# One iteration's conversation: a tool call, its result, a closing text.
ONE_ITERATION = [tool("bash", {"command": "echo working"}), text("Progress noted; ending the turn.")]


def _prompt_block(body: dict[str, Any]) -> str:
    (block,) = [b for b in body["system"] if b["text"].startswith("# PROMPT.md")]
    return str(block["text"])


def test_an_edited_prompt_reaches_the_next_iteration_whose_context_is_fresh(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine({"responses": ONE_ITERATION * 2}, tmp_path) as eng:
        project_id = eng.submit(prompt="Version one of the instructions.")
        eng.run_next(project_id)

        # When: the prompt is edited between iterations (what `raas prompt` does).
        with session_scope() as session:
            session.get_one(Project, project_id).prompt = "Version two of the instructions."
        eng.run_next(project_id)

        first, _, second, _ = bodies(eng, project_id)
        assert "Version one" in _prompt_block(first)
        assert "Version two" in _prompt_block(second)
        assert "Version one" not in str(second)
        # Fresh context: the second iteration opens with its own single message.
        (opening,) = second["messages"]
        assert opening["role"] == "user"
        assert opening_text(opening).startswith("Iteration 2 ")
        assert "working" not in str(second["messages"])


def test_continue_context_carries_the_previous_conversation(services: dict[str, str], tmp_path: Path) -> None:
    with engine({"responses": ONE_ITERATION * 2}, tmp_path) as eng:
        project_id = eng.submit(raas_toml='context = "continue"')
        eng.run_next(project_id)
        eng.run_next(project_id)

        _, last_of_first, first_of_second, _ = bodies(eng, project_id)
        carried = first_of_second["messages"]
        # The whole first conversation (its last request plus the answer to it), then the new opening.
        assert carried[:3] == last_of_first["messages"]
        assert carried[3] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "Progress noted; ending the turn."}],
        }
        assert carried[4]["role"] == "user"
        assert opening_text(carried[4]).startswith("Iteration 2 ")
        assert len(carried) == 5


def test_continue_context_drops_the_oldest_exchanges_to_fit_keeping_tool_pairs(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given: iterations that each carry about 700 tokens (a big tool output) into a 1000-token window.
    big = [tool("bash", {"command": "seq 1 600"}), text("Counted; ending the turn.")]
    with engine({"responses": big * 3}, tmp_path) as eng:
        project_id = eng.submit(raas_toml='context = "continue"\ncontext_window_tokens = 1000')
        for _ in range(3):
            eng.run_next(project_id)

        requests = bodies(eng, project_id)
        assert len(requests[2]["messages"]) == 5  # iteration 1 alone fits: carried whole
        first_of_third = requests[4]["messages"]
        # Then: iteration 1 is gone, iteration 2 is kept whole, from its opening on.
        openings = [opening_text(m) for m in first_of_third if m["role"] == "user" and opening_text(m)]
        assert [o.split(" of project")[0] for o in openings] == ["Iteration 2", "Iteration 3"]
        assert first_of_third[0]["role"] == "user"
        assert opening_text(first_of_third[0]).startswith("Iteration 2 ")
        (use,) = first_of_third[1]["content"]
        (result,) = first_of_third[2]["content"]
        assert (use["type"], result["type"], result["tool_use_id"]) == ("tool_use", "tool_result", use["id"])
        assert len(first_of_third) == 5
