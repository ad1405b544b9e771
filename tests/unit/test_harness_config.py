"""Choosing a harness in raas.toml, and checking its pinned binary (issue #12 points 1 and 2)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from shared.errors import InvalidInput
from shared.harnesses import CLI_TOOLS, HARNESSES, check_binaries, check_binary, installed
from shared.project_config import parse_project_config
from shared.settings import Settings
from shared.tool_names import SANDBOX_TOOLS
from workers.main import check_harnesses

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            'harness = "claude"',
            ["raas.toml: harness", "'api', 'claude-code', 'codex' or 'opencode'", "'claude'"],
        ),
        (
            '[categories.builder]\nharness = "aider"',
            ["raas.toml: categories.builder.harness", "'claude-code', 'codex' or 'opencode'"],
        ),
        (
            "[harnesses.aider]\nargs = []",
            ["raas.toml: harnesses", "unknown harness 'aider'", "claude-code, codex, opencode"],
        ),
        (
            "[harnesses.codex]\nturns = 3",
            ["raas.toml: harnesses.codex.turns", "unknown key", "model, args, allowed_tools, max_turns"],
        ),
        (
            "[harnesses.opencode]\nmax_turns = 0",
            ["harnesses.opencode.max_turns", "greater than or equal to 1"],
        ),
        (
            '[categories.planner]\nharness = "claude-code"',
            ["categories.planner.harness", "submit_plan", "no agent CLI has"],
        ),
        ('[categories.validator]\nharness = "codex"', ["categories.validator.harness", "runs check_command"]),
        (
            '[categories.judge]\nrole = "planner"\nharness = "opencode"',
            ["categories.judge.harness", "a planner needs submit_plan"],
        ),
        ('[harnesses.codex]\nmodel = "gpt-9"\n', ["model 'gpt-9' has no price"]),
        (
            '[harnesses.codex]\nallowed_tools = ["shell"]\n',
            ["harnesses", "codex.allowed_tools", "cannot limit its own tools", "remove allowed_tools"],
        ),
        (
            'harness = "claude-code"\n[harnesses.claude-code]\nmodel = "claude-x"',
            ["model 'claude-x' has no price"],
        ),
    ],
)
def test_a_bad_harness_setting_is_one_line_naming_the_key_and_the_choices(
    text: str, fragments: list[str]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_project_config(text)

    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_the_projects_harness_runs_builders_and_research_but_planner_and_validator_stay_on_api() -> None:
    config = parse_project_config('harness = "claude-code"\n[categories.searcher]\nharness = "opencode"\n')

    assert config.harness_for("builder") == "claude-code"
    assert config.harness_for("analyzer") == "claude-code"
    assert config.harness_for("mine") == "claude-code"  # a category nobody configured builds
    assert config.harness_for("searcher") == "opencode"  # the category's own wins
    assert config.harness_for("planner") == "api"
    assert config.harness_for("validator") == "api"
    assert parse_project_config("").harness_for("builder") == "api"


def test_a_harness_uses_its_tables_model_then_the_categorys_then_its_own_default() -> None:
    config = parse_project_config(
        'model = "claude-opus-4-6"\n'
        '[categories.builder]\nharness = "codex"\n'
        '[categories.searcher]\nharness = "claude-code"\nmodel = "claude-haiku-4-5"\n'
        '[categories.analyzer]\nharness = "opencode"\n'
        '[harnesses.opencode]\nmodel = "claude-sonnet-4-5"\nmax_turns = 7\nargs = ["--log-level", "WARN"]\n'
    )

    assert config.model_for("builder") == HARNESSES["codex"].default_model  # an OpenAI model, priced
    assert config.model_for("searcher") == "claude-haiku-4-5"
    assert config.model_for("analyzer") == "claude-sonnet-4-5"
    assert config.model_for("planner") == "claude-opus-4-6"
    tuned = config.harness_config_for("analyzer")
    assert (tuned.model, tuned.max_turns, tuned.args) == ("claude-sonnet-4-5", 7, ["--log-level", "WARN"])
    assert config.harness_config_for("builder").max_turns == config.max_turns


def test_every_cli_harness_honours_the_sandbox_tools_and_no_engine_tool() -> None:
    assert set(SANDBOX_TOOLS) <= set(CLI_TOOLS)
    assert "submit_plan" not in CLI_TOOLS
    assert all(h.tools == CLI_TOOLS for h in HARNESSES.values())


def _fake_binary(cache: Path, name: str, prints: str) -> Path:
    path = HARNESSES[name].path_in(cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(0o755)
    return path


def test_a_missing_binary_names_the_harness_and_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_binary("claude-code", tmp_path)

    message = str(caught.value)
    assert message.startswith("harness claude-code: 2.1.330 is not installed")
    assert "bash scripts/setup.sh" in message
    assert "bash scripts/install-harnesses.sh claude-code" in message


def test_a_wrong_version_says_what_was_found_and_what_is_wanted(tmp_path: Path) -> None:
    _fake_binary(tmp_path, "codex", "codex-cli 0.1.0")

    with pytest.raises(InvalidInput) as caught:
        check_binaries(["api", "codex"], tmp_path)

    message = str(caught.value)
    assert "harness codex: wrong version" in message
    assert "found 'codex-cli 0.1.0', want 'codex-cli 0.169.0'" in message
    assert "bash scripts/install-harnesses.sh codex" in message


def test_the_pinned_version_passes_and_a_reinstall_is_seen(tmp_path: Path) -> None:
    path = _fake_binary(tmp_path, "opencode", "1.18.33")
    assert check_binaries({"api", "opencode"}, tmp_path) == {"opencode": path}
    assert installed(tmp_path)["opencode"] is None
    assert "not installed" in str(installed(tmp_path)["claude-code"])

    # The answer is cached per path and mtime: a binary replaced in place is asked again.
    _fake_binary(tmp_path, "opencode", "1.0.0")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    with pytest.raises(InvalidInput, match="found '1.0.0'"):
        check_binary("opencode", tmp_path)


def test_the_install_script_pins_an_integrity_for_every_harness_it_reads_from_here() -> None:
    script = (ROOT / "scripts" / "install-harnesses.sh").read_text()

    assert "python -m shared.harnesses --print-pins" in script or "-m shared.harnesses --print-pins" in script
    for harness in HARNESSES.values():
        assert re.search(rf'\["{re.escape(harness.npm_spec)}"\]="sha512-[A-Za-z0-9+/=]{{88}}"', script), (
            harness.name
        )


def test_the_pinned_binaries_installed_by_setup_print_their_versions() -> None:
    # scripts/setup.sh installs them (scripts/install-harnesses.sh); a machine without them fails here.
    cache = Settings().harness_cache

    assert installed(cache) == dict.fromkeys(HARNESSES)


def test_a_worker_names_what_it_can_run_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    _fake_binary(tmp_path, "opencode", "1.18.33")
    settings = Settings(harness_cache=tmp_path)

    assert check_harnesses(["api", "opencode"], settings) == ["api", "opencode"]
    with pytest.raises(InvalidInput, match="harness codex: 0.169.0 is not installed"):
        check_harnesses(["codex"], settings)
    with pytest.raises(
        InvalidInput, match="unknown harness 'gemini'; choices: api, claude-code, codex, opencode"
    ):
        check_harnesses(["gemini"], settings)
