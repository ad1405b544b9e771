"""The harnesses an iteration's agent can run under, in one table: what each is, where its pinned
binary lives, and which of our tools it can honour.

``api`` is our own tool-use loop (no binary). The agent CLIs come from npm as self-contained
native binaries; ``scripts/install-harnesses.sh`` puts the pinned versions into a cache on the
worker host (``RAAS_HARNESS_CACHE``, one directory ``NAME-VERSION`` each) and every iteration's
container gets its binary bind-mounted read-only at :attr:`Harness.mount`. The script reads its
pins from here (``python -m shared.harnesses --print-pins``), so the versions have one source.

Which categories a CLI harness can run (checked by :class:`shared.project_config.ProjectConfig`):
it brings its own shell and file tools (our ``bash``, ``read``, ``write``, ``edit``, ``glob``,
``grep``) and ends an iteration through the completion marker, but it has none of our engine
tools (``submit_plan``, ``spawn_subagent``, the memory and message tools). So

- a **planner** needs ``submit_plan``, which no CLI harness has: the planner stays on ``api``;
- a **validator** runs the project's ``check_command`` and no model at all: a harness there
  would mean nothing.

The project-wide ``harness`` applies to builder and research categories only; ``harness`` set
on a planner or validator category is refused in one line.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidInput
from shared.tool_names import SANDBOX_TOOLS, TASK_COMPLETE

HarnessName = Literal["api", "claude-code", "codex", "opencode"]
HARNESS_NAMES: tuple[str, ...] = get_args(HarnessName)
DEFAULT_HARNESS: HarnessName = "api"
#: Where every harness binary is mounted in the container (read-only), one directory per name.
MOUNT_ROOT = "/opt/raas/harness"
SETUP_COMMAND = "bash scripts/setup.sh"
_VERSION_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Harness:
    """One agent CLI: its pin, where its binary is, and what it can do.

    ``binary`` is the path inside the cache directory ``NAME-VERSION`` (what the npm tarball
    holds below its ``package/`` prefix). ``prints`` is what ``binary --version`` prints for the
    pinned version, compared after stripping whitespace.
    """

    name: str
    version: str
    npm_package: str
    binary: str
    prints: str
    #: Our tool names it can honour (with its own native tools).
    tools: tuple[str, ...]
    #: The model it uses when ``[harnesses.NAME] model`` and the category's model are unset:
    #: None means the project's Claude model (the harness speaks the Anthropic API).
    default_model: str | None = None
    #: The npm version when it differs from the CLI's (codex's platform build is its own tag).
    npm_version: str | None = None
    #: Whether ``[harnesses.NAME] allowed_tools`` can be honoured: Codex 0.169.0 has no switch or
    #: config key limiting its own tools (``enabled_tools`` is for MCP servers' only), so it is
    #: refused there rather than ignored.
    limits_tools: bool = True
    #: The model API it speaks, the only one its gateway lease answers (with ``count_tokens`` for
    #: the Messages API): Codex 0.169.0 speaks only OpenAI's Responses API.
    api: Literal["messages", "responses"] = "messages"
    #: What its first request's input is bounded by (measured with the pinned binary against the
    #: scripted model, tests/integration/test_budget_harnesses.py): the provider's count for the
    #: Messages API, the request's size for the Responses API, which has no count here. A budget
    #: that cannot pay it with a floor-sized answer is refused at submission.
    first_request_tokens: int = 4_000

    @property
    def npm_spec(self) -> str:
        """``package@version`` to ``npm pack``."""
        return f"{self.npm_package}@{self.npm_version or self.version}"

    @property
    def cache_dir_name(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def mount(self) -> str:
        """The binary's path in the container."""
        return f"{MOUNT_ROOT}/{self.name}"

    def path_in(self, cache: Path) -> Path:
        """Where the pinned binary is under the cache root ``cache``."""
        return cache / self.cache_dir_name / self.binary


# Our shell and file tools (through the CLI's own), and completion through the completion
# marker; no engine tools.
CLI_TOOLS = (*SANDBOX_TOOLS, TASK_COMPLETE)

HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness(
            name="claude-code",
            version="2.1.330",
            npm_package="@anthropic-ai/claude-code-linux-x64",
            binary="claude",
            prints="2.1.330 (Claude Code)",
            tools=CLI_TOOLS,
            first_request_tokens=22_300,  # ~89 KB: its system prompt and tools
        ),
        Harness(
            name="codex",
            version="0.169.0",
            # The wrapper @openai/codex@0.169.0 points to this platform build.
            npm_package="@openai/codex",
            npm_version="0.169.0-linux-x64",
            binary="vendor/x86_64-unknown-linux-musl/bin/codex",
            prints="codex-cli 0.169.0",
            tools=CLI_TOOLS,
            # A model Codex 0.169.0 has metadata for: with another it reports "Model metadata ...
            # not found" and offers no apply_patch. Priced in shared.pricing.
            default_model="gpt-5.5",
            limits_tools=False,
            api="responses",
            first_request_tokens=42_000,  # ~41 KB, bounded by its size (+512)
        ),
        Harness(
            name="opencode",
            version="1.18.33",
            npm_package="opencode-linux-x64",
            binary="bin/opencode",
            prints="1.18.33",
            tools=CLI_TOOLS,
            first_request_tokens=8_600,  # ~34 KB
        ),
    )
}


class HarnessConfig(BaseModel):
    """``[harnesses.NAME]`` in raas.toml: what a user tunes of one agent CLI."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        description="Model the harness uses (it must have a price); unset: the category's or the "
        "project's model (codex: gpt-5.5, an OpenAI model).",
    )
    args: list[str] = Field(default_factory=list, description="Extra command-line arguments of the CLI.")
    allowed_tools: list[str] | None = Field(
        default=None,
        description='The CLI\'s own tool names it may use (claude-code: ["Bash", "Read", "Write"], '
        'opencode: ["bash", "read", "write"]; codex cannot limit its tools); unset: its defaults.',
    )
    max_turns: int | None = Field(
        default=None, ge=1, description="Turns per iteration at most; unset: the project's max_turns."
    )


def install_command(name: str) -> str:
    return f"{SETUP_COMMAND}, or bash scripts/install-harnesses.sh {name}"


_versions: dict[tuple[Path, int], str] = {}


def _version_of(binary: Path) -> str:
    """What ``binary --version`` prints, cached per path and mtime (a reinstall changes it)."""
    key = (binary, binary.stat().st_mtime_ns)
    if key not in _versions:
        try:
            done = subprocess.run(  # noqa: S603  (our own pinned binary)
                [str(binary), "--version"],
                capture_output=True,
                text=True,
                timeout=_VERSION_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            _versions[key] = done.stdout.strip() or f"nothing (exit {done.returncode})"
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"an error ({type(exc).__name__})"
    return _versions[key]


def check_binary(name: str, cache: Path) -> Path:
    """The pinned binary of harness ``name`` under the cache root ``cache``, checked.

    Raises:
        InvalidInput: an unknown harness, the binary missing, or it printing another version;
            one line naming the harness, what is wrong and the setup command.
    """
    if name not in HARNESSES:
        msg = f"harness {name!r} has no binary; binaries: {', '.join(HARNESSES)}"
        raise InvalidInput(msg)
    harness = HARNESSES[name]
    path = harness.path_in(cache)
    if not path.is_file():
        msg = (
            f"harness {name}: {harness.version} is not installed ({path} missing); "
            f"run {install_command(name)}"
        )
        raise InvalidInput(msg)
    found = _version_of(path)
    if found != harness.prints:
        msg = (
            f"harness {name}: wrong version at {path}: found {found!r}, want {harness.prints!r}; "
            f"run {install_command(name)}"
        )
        raise InvalidInput(msg)
    return path


def check_binaries(names: Iterable[str], cache: Path) -> dict[str, Path]:
    """:func:`check_binary` for each harness in ``names`` that has a binary (``api`` has none)."""
    return {name: check_binary(name, cache) for name in sorted(names) if name in HARNESSES}


def installed(cache: Path) -> dict[str, str | None]:
    """Each CLI harness and why it cannot run here, None when its pinned binary is in place."""
    status: dict[str, str | None] = {}
    for name in HARNESSES:
        try:
            check_binary(name, cache)
            status[name] = None
        except InvalidInput as exc:
            status[name] = str(exc)
    return status


def _print_pins() -> None:
    # One line per harness for scripts/install-harnesses.sh: NAME NPM_SPEC DIR BINARY PRINTS...
    for name, harness in HARNESSES.items():
        print(name, harness.npm_spec, harness.cache_dir_name, harness.binary, harness.prints)  # noqa: T201


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.harnesses", description=__doc__)
    parser.add_argument(
        "--print-pins", action="store_true", help="one line per harness, for the install script"
    )
    args = parser.parse_args(argv)
    if args.print_pins:
        _print_pins()
        return 0
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
