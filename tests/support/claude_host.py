"""The pinned Claude Code run on the host against a gateway lease, as the worker runs it in a
container (``ANTHROPIC_UNIX_SOCKET`` + ``ANTHROPIC_BASE_URL=http://localhost``, the lease's token
as its key): for the gateway's tests, which need the real CLI but no container."""

from __future__ import annotations

import subprocess
from pathlib import Path

from shared.harnesses import HARNESSES
from shared.settings import get_settings
from workers.gateway import GatewayLease

CLAUDE = HARNESSES["claude-code"].path_in(get_settings().harness_cache)
CLAUDE_MISSING = f"{CLAUDE} is missing: run bash scripts/setup.sh (it installs the pinned harnesses)"


def run_claude_on_host(
    lease: GatewayLease, home: Path, prompt: str, max_turns: int, extra: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``claude -p prompt`` (stream-json, claude-sonnet-4-6, ``extra`` arguments last) in ``home``,
    its model calls through the lease's socket; nothing of the machine's environment but PATH."""
    home.mkdir(exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "ANTHROPIC_UNIX_SOCKET": str(lease.socket_path),
        "ANTHROPIC_BASE_URL": "http://localhost",
        "ANTHROPIC_API_KEY": lease.token,
    }
    argv = [str(CLAUDE), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--model", "claude-sonnet-4-6", "--no-session-persistence", "--max-turns", str(max_turns)]
    argv += extra or []
    return subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=120, check=False)
