"""The real agent CLIs (Claude Code, Codex, OpenCode) driven end to end by the scripted model,
on the host with a throwaway HOME and every CLI's outside traffic switched off, with the scripts
committed beside the recorded fixtures (``tests/fixtures/harnesses``). Each run writes a file with
the CLI's own tool, runs it, and ends on the script's final text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shared.harnesses import HARNESSES
from shared.settings import get_settings
from workers.scripted_model import Script, ScriptedModelServer

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parents[1] / "fixtures" / "harnesses"
PROMPT = "Write hello.py that prints a greeting, run it, and say when you are done."
FINAL_TEXT = "hello.py prints its greeting. All done."
RUN_TIMEOUT_S = 120


def binary(name: str) -> Path:
    path = HARNESSES[name].path_in(get_settings().harness_cache)
    assert path.is_file(), f"{name} is not installed at {path}: run bash scripts/setup.sh"
    return path


def script_for(harness: str, workspace: Path) -> Script:
    """A committed fixture script, its container paths (/workspace) moved to ``workspace``."""
    text = (FIXTURES / harness / "write-and-run.script.json").read_text()
    return Script.model_validate(json.loads(text.replace("/workspace/", f"{workspace}/")))


def run(argv: list[str | Path], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd.parent / "home")}
    Path(base["HOME"]).mkdir(exist_ok=True)
    return subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


def test_claude_code_walks_its_script_over_the_unix_socket(workspace: Path, tmp_path: Path) -> None:
    session = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
    socket_path = tmp_path / "model.sock"
    with ScriptedModelServer(script_for("claude-code", workspace), unix_path=socket_path) as server:
        result = run(
            [binary("claude-code"), "-p", PROMPT, "--output-format", "stream-json", "--verbose",
             "--dangerously-skip-permissions", "--session-id", session, "--model", "claude-sonnet-4-6"],
            workspace,
            {
                "IS_SANDBOX": "1",  # root on the host; in the container it runs as uid 1000
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
                "ANTHROPIC_UNIX_SOCKET": str(socket_path),
                "ANTHROPIC_BASE_URL": "http://localhost",
                "ANTHROPIC_API_KEY": "scripted-test-token",
            },
        )  # fmt: skip
        logged = server.requests()

    assert result.returncode == 0, result.stderr[-2000:]
    final = events(result.stdout)[-1]
    assert (final["type"], final["is_error"], final["terminal_reason"]) == ("result", False, "completed")
    assert final["result"] == FINAL_TEXT
    assert (workspace / "hello.py").read_text() == "print('hello from claude code')\n"
    assert [(entry.path, entry.session, entry.turn) for entry in logged] == [
        ("/v1/messages", session, turn) for turn in range(3)
    ]
    assert logged[0].headers["x-claude-code-session-id"] == session


def test_codex_walks_its_script_through_the_responses_api(workspace: Path, tmp_path: Path) -> None:
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    with ScriptedModelServer(script_for("codex", workspace)) as server:
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "scripted"\ncheck_for_update_on_startup = false\n'
            "[analytics]\nenabled = false\n"
            f'[model_providers.scripted]\nname = "scripted"\nbase_url = "{server.base_url}/v1"\n'
            'wire_api = "responses"\nenv_key = "RAAS_MODEL_TOKEN"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n"
        )
        result = run(
            [binary("codex"), "exec", "--json", "--skip-git-repo-check", "--disable", "plugins",
             "--dangerously-bypass-approvals-and-sandbox", PROMPT],
            workspace,
            {"CODEX_HOME": str(codex_home), "RAAS_MODEL_TOKEN": "scripted-test-token"},
        )  # fmt: skip
        logged = server.requests()

    assert result.returncode == 0, result.stderr[-2000:]
    out = events(result.stdout)
    thread = out[0]["thread_id"]
    items = [event["item"] for event in out if event["type"] == "item.completed"]
    assert [item["type"] for item in items] == [
        "agent_message",
        "file_change",
        "command_execution",
        "agent_message",
    ]
    assert items[2]["aggregated_output"] == "hello from codex\n"
    assert items[-1]["text"] == FINAL_TEXT
    assert out[-1]["type"] == "turn.completed"
    assert out[-1]["usage"]["input_tokens"] > 0
    assert (workspace / "hello.py").read_text() == "print('hello from codex')\n"
    assert [(entry.path, entry.session, entry.turn) for entry in logged] == [
        ("/v1/responses", thread, turn) for turn in range(3)
    ]


def test_opencode_title_request_takes_no_turn_of_the_script(workspace: Path) -> None:
    with ScriptedModelServer(script_for("opencode", workspace)) as server:
        config = {
            "model": "anthropic/claude-sonnet-4-5",
            "small_model": "anthropic/claude-haiku-4-5",
            "provider": {"anthropic": {"options": {"baseURL": f"{server.base_url}/v1"}}},
        }
        result = run(
            [binary("opencode"), "run", "--format", "json", PROMPT],
            workspace,
            {
                "ANTHROPIC_API_KEY": "scripted-test-token",
                "OPENCODE_CONFIG_CONTENT": json.dumps(config),
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                "OPENCODE_DISABLE_SHARE": "1",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            },
        )
        logged = server.requests()

    assert result.returncode == 0, result.stderr[-2000:]
    out = events(result.stdout)
    session = out[0]["sessionID"]
    texts = [event["part"]["text"] for event in out if event["type"] == "text"]
    assert texts[-1] == FINAL_TEXT
    assert (workspace / "hello.py").read_text() == "print('hello from opencode')\n"
    # opencode asks for the title beside the first turn, not before it: either may come first
    [title] = [entry for entry in logged if entry.side_request is not None]
    work = [entry for entry in logged if entry is not title]
    assert (title.session, title.turn, title.side_request, title.body["model"]) == (
        session, None, "title", "claude-haiku-4-5",
    )  # fmt: skip
    assert [(entry.session, entry.turn, entry.side_request) for entry in work] == [
        (session, turn, None) for turn in range(3)
    ]
