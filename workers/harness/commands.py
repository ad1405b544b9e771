"""How each agent CLI is started in the container: its command line and its environment.

Every CLI gets the same things in its own dialect: the iteration's prompt (the api harness's
Ralph framing and task, :mod:`workers.agent.prompts`), the model, the turn cap, the user's extra
arguments and allowed tools (``[harnesses.NAME]``), the gateway's per-iteration token as its API
key (never the real key), and the switches that keep it from phoning home (issue #12 point 6):
the container has no network, so anything it tried would only hang or retry.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from shared.harnesses import HARNESSES, HarnessConfig
from workers.agent import prompts
from workers.gateway.mcp_tools import SERVER_NAME
from workers.harness import mcp_config
from workers.records import Claim
from workers.sandbox.container import AGENT_HOME

SOCKET_DIR = "/run/raas"  # where the gateway's lease directory is mounted (llm.sock inside)
COMPLETION_FILE = ".raas/complete"
#: Retries of a failed model call: few, so a dead gateway does not hold an iteration for minutes.
MAX_RETRIES = 3

_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def _quiet(places: Places) -> dict[str, str]:
    return {"HOME": places.home, **_QUIET}


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Places:
    """Where the CLI finds what it needs: in the container (:func:`in_container`), or on the host
    when the user lets a harness run without Docker."""

    binary: str
    socket: str = f"{SOCKET_DIR}/llm.sock"
    home: str = AGENT_HOME
    workspace: str = "/workspace"
    relay: str = "/opt/raas/relay.py"
    relay_port: int = 8765


def in_container(harness: str) -> Places:
    return Places(binary=HARNESSES[harness].mount)


def instructions(claim: Claim, workspace: str) -> tuple[str, str]:
    """(system text, prompt): the api harness's framing, and how to say the task is done."""
    system = "\n\n".join(block["text"] for block in prompts.system_blocks(claim))
    first = prompts.first_message(claim)["content"][0]["text"]
    done = (
        f"When the whole task is done and verified, and only then, write a short summary of what "
        f"was done to the file {COMPLETION_FILE} in the workspace (create the directory); that "
        f"ends the task. The workspace is {workspace}."
    )
    marker = claim.config.completion_marker
    if marker:
        done += f" You may instead end your final message with {marker}."
    return system, f"{first}\n\n{done}"


def session_id(claim: Claim) -> str:
    """A stable id for this attempt's CLI session (a redelivered attempt gets its own)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"raas:{claim.iteration_id}:{claim.attempt}"))


def claude_code(claim: Claim, config: HarnessConfig, token: str, places: Places) -> Invocation:
    system, prompt = instructions(claim, places.workspace)
    argv = [
        places.binary,
        "-p",
        prompt,
        "--append-system-prompt",
        system,
        "--output-format",
        "stream-json",
        "--verbose",
        # Its tools run in our sandbox: the container is the permission boundary.
        "--dangerously-skip-permissions",
        "--no-session-persistence",
        "--session-id",
        session_id(claim),
        "--max-turns",
        str(config.max_turns or claim.config.max_turns),
    ]
    if config.model:
        argv += ["--model", config.model]
    if config.allowed_tools is not None:
        argv += ["--allowedTools", ",".join(config.allowed_tools)]
    argv += config.args
    env = {
        **_quiet(places),
        "ANTHROPIC_UNIX_SOCKET": places.socket,
        # Both are needed: with the socket alone it speaks TLS into it.
        "ANTHROPIC_BASE_URL": "http://localhost",
        "ANTHROPIC_API_KEY": token,
        "CLAUDE_CODE_MAX_RETRIES": str(MAX_RETRIES),
    }
    if not mcp_config.offered(claim):
        return Invocation(argv, env)
    # Its model calls use the socket; the memory tools (HTTP MCP, no socket) the relay.
    relayed, relay_env = _relayed([*argv, *mcp_config.claude_code_args(token, places.relay_port)], places)
    return Invocation(relayed, {**env, **relay_env})


# Codex and OpenCode cannot use a unix socket: the gateway's relay (stdlib python3, which the
# sandbox image has) listens on loopback inside the container and pipes to the socket. The CLI
# starts once it listens; its config file is written into the tmpfs home from the environment.
_RELAYED = """
python3 "$RAAS_RELAY" "$RAAS_RELAY_PORT" "$RAAS_SOCKET" >"$HOME/relay.out" 2>&1 &
tries=0
until grep -q listening "$HOME/relay.out" 2>/dev/null; do
  tries=$((tries + 1))
  if [ "$tries" -gt 400 ]; then
    echo "the model relay did not start:" >&2; cat "$HOME/relay.out" >&2; exit 97
  fi
  sleep 0.05
done
if [ -n "$RAAS_CODEX_CONFIG" ]; then
  mkdir -p "$CODEX_HOME" && printf '%s\n' "$RAAS_CODEX_CONFIG" >"$CODEX_HOME/config.toml"
fi
exec "$@"
"""


def _relayed(argv: list[str], places: Places) -> tuple[list[str], dict[str, str]]:
    env = {
        "RAAS_RELAY": places.relay,
        "RAAS_RELAY_PORT": str(places.relay_port),
        "RAAS_SOCKET": places.socket,
    }
    return ["sh", "-c", _RELAYED, "sh", *argv], env


def codex(claim: Claim, config: HarnessConfig, token: str, places: Places) -> Invocation:
    """``codex exec --json`` on the Responses API through the relay. Codex has no turn cap of its
    own: the gateway's (:class:`workers.gateway.gate.Gate`) ends its iteration."""
    system, prompt = instructions(claim, places.workspace)
    toml = f"""model_provider = "raas"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.raas]
name = "raas"
base_url = "http://127.0.0.1:{places.relay_port}/v1"
wire_api = "responses"
env_key = "RAAS_MODEL_TOKEN"
request_max_retries = {MAX_RETRIES}
stream_max_retries = {MAX_RETRIES}
"""
    if mcp_config.offered(claim):
        toml += mcp_config.codex_toml(places.relay_port, "RAAS_MODEL_TOKEN")
    argv = [
        places.binary,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        # Its tools run in our sandbox: the container is the boundary (its own needs namespaces).
        "--dangerously-bypass-approvals-and-sandbox",
    ]
    if config.model:
        argv += ["--model", config.model]
    argv += [*config.args, f"{system}\n\n{prompt}"]
    relayed, relay_env = _relayed(argv, places)
    env = {
        **_quiet(places),
        **relay_env,
        # Codex refuses to make its helper links when CODEX_HOME is under /tmp.
        "CODEX_HOME": f"{places.home}/.codex",
        "RAAS_CODEX_CONFIG": toml,
        "RAAS_MODEL_TOKEN": token,
    }
    return Invocation(relayed, env)


def opencode(claim: Claim, config: HarnessConfig, token: str, places: Places) -> Invocation:
    """``opencode run --format json`` on the Anthropic API through the relay.

    Its turn cap is its build agent's ``steps`` (past it the model is asked to wrap up), and the
    session is given its title, so no side-request is made (and charged) for one.
    """
    system, prompt = instructions(claim, places.workspace)
    model = config.model or claim.config.model
    settings: dict[str, object] = {
        "autoupdate": False,
        "share": "disabled",
        "model": f"anthropic/{model}",
        "small_model": f"anthropic/{model}",
        "provider": {"anthropic": {"options": {"baseURL": f"http://127.0.0.1:{places.relay_port}/v1"}}},
        "agent": {"build": {"steps": config.max_turns or claim.config.max_turns}},
    }
    if mcp_config.offered(claim):
        settings["mcp"] = mcp_config.opencode_entry(token, places.relay_port)
    if config.allowed_tools is not None:
        settings["tools"] = _opencode_tools(config.allowed_tools, mcp_config.offered(claim))
    title = f"{claim.project_name} iteration {claim.number}"
    argv = [places.binary, "run", "--format", "json", "--title", title, *config.args, f"{system}\n\n{prompt}"]
    relayed, relay_env = _relayed(argv, places)
    env = {
        **_quiet(places),
        **relay_env,
        "ANTHROPIC_API_KEY": token,
        "OPENCODE_CONFIG_CONTENT": json.dumps(settings),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }
    return Invocation(relayed, env)


def _opencode_tools(allowed: list[str], coordination: bool) -> dict[str, bool]:
    """OpenCode's ``tools`` switches for an allow-list: every tool off, then the listed ones on
    (its rules are ordered, the last match wins), our memory tools too when offered. It turns them
    into permission rules itself (``write`` and ``patch`` are its ``edit`` permission, so either
    also allows ``edit``); a tool switched off is not offered to the model at all."""
    tools = {"*": False, **dict.fromkeys(allowed, True)}
    if coordination:
        tools[f"{SERVER_NAME}_*"] = True
    return tools
