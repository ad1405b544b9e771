"""What every agent CLI module fills in (:class:`Cli`: its command line, its output parser) and
what they share: where things are in the container, the prompt, the quiet switches, the relay.

Every CLI gets the same things in its own dialect: the iteration's prompt (the api harness's
Ralph framing and task, :mod:`workers.agent.prompts`), the model, the turn cap, the user's extra
arguments and allowed tools (``[harnesses.NAME]``), the gateway's per-iteration token as its API
key (never the real key), and the switches that keep it from phoning home (issue #12 point 6):
the container has no network, so anything it tried would only hang or retry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from shared.events import EventData
from shared.harnesses import HARNESSES, HarnessConfig, HarnessName
from workers.agent import prompts
from workers.claim import Claim
from workers.runners.cli.ending import RunEnd
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


def quiet(places: Places) -> dict[str, str]:
    """The environment every CLI starts with: its home, and no telemetry, reports or updates."""
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


def in_container(harness: HarnessName) -> Places:
    return Places(binary=HARNESSES[harness].mount)


class Parser(Protocol):
    """A CLI's stdout read line by line: each line's events; the run's end once it printed it."""

    end: RunEnd | None

    def feed(self, line: str) -> list[EventData]: ...


@dataclass(frozen=True)
class Cli:
    """One agent CLI, as its module describes it: its command line, its output parser, and whether
    it needs the relay (Claude Code needs it only for the memory tools,
    :mod:`workers.runners.cli.mcp_config`)."""

    name: HarnessName
    invocation: Callable[[Claim, HarnessConfig, str, Places], Invocation]
    parser: Callable[[], Parser]
    relayed: bool


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


def relayed(argv: list[str], places: Places) -> tuple[list[str], dict[str, str]]:
    """``argv`` started once the relay listens: the command line and the relay's environment."""
    env = {
        "RAAS_RELAY": places.relay,
        "RAAS_RELAY_PORT": str(places.relay_port),
        "RAAS_SOCKET": places.socket,
    }
    return ["sh", "-c", _RELAYED, "sh", *argv], env
