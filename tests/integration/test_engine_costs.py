"""Every token is counted and priced per LLM call, and the stable prefix is marked for caching."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.engine import engine
from tests.support.records import agent, bodies, iterations, messages, project, text, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]

USAGE = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_creation_input_tokens": 2000,
    "cache_read_input_tokens": 4000,
}


def test_usage_with_cache_tokens_is_stored_and_priced_per_call(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [text("Nothing to do.", usage=USAGE)]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        (reply,) = [m for m in messages(project_id) if m.role == "assistant"]
        assert reply.model == "claude-sonnet-4-6"
        assert (
            reply.input_tokens,
            reply.output_tokens,
            reply.cache_creation_input_tokens,
            reply.cache_read_input_tokens,
        ) == (1000, 200, 2000, 4000)
        # By hand, Sonnet 4.6 at $3 in / $15 out per million, cache write 1.25x and read 0.1x input:
        # 1000 * 3 + 200 * 15 + 2000 * 3.75 + 4000 * 0.30 = 14,700 micro-dollars.
        assert reply.cost_usd == Decimal("0.014700")
        assert project(project_id).spent_usd == Decimal("0.014700")
        assert iterations(project_id)[0].cost_usd == Decimal("0.014700")
        root = agent(project_id)
        assert (root.input_tokens, root.output_tokens, root.cost_usd) == (1000, 200, Decimal("0.014700"))


def test_requests_mark_the_tools_and_prompt_for_the_prompt_cache(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [tool("bash", {"command": "true"}), text("Done.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(prompt="Build the thing.")
        eng.run_next(project_id)

        for body in bodies(eng, project_id):
            *first_tools, last_tool = body["tools"]
            assert last_tool["cache_control"] == {"type": "ephemeral"}
            assert all("cache_control" not in t for t in first_tools)
            *first_blocks, prompt_block = body["system"]
            assert prompt_block["text"] == "# PROMPT.md\n\nBuild the thing."
            assert prompt_block["cache_control"] == {"type": "ephemeral"}
            assert all("cache_control" not in b for b in first_blocks)


def test_a_pricing_override_in_raas_toml_changes_the_cost(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [text("Nothing to do.", usage=USAGE)]}
    raas_toml = '[pricing."claude-sonnet-4-6"]\ninput = 10\noutput = 20\ncache_read = 1\n'
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=raas_toml)
        eng.run_next(project_id)

        (reply,) = [m for m in messages(project_id) if m.role == "assistant"]
        # 1000 * 10 + 200 * 20 + 2000 * 12.5 (1.25x the overridden input) + 4000 * 1 = 43,000 micro-dollars.
        assert reply.cost_usd == Decimal("0.043000")
        assert project(project_id).spent_usd == Decimal("0.043000")
