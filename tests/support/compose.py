"""Docker Compose as the tests run it: Debian's docker-compose (1.29), or the compose plugin."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT_DIR = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT_DIR / "compose.yaml"


def compose_command() -> list[str]:
    """The compose CLI; fails (never skips) the test when there is none."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if (
        shutil.which("docker")
        and not subprocess.run(["docker", "compose", "version"], capture_output=True).returncode
    ):
        return ["docker", "compose"]
    pytest.fail("no docker compose here: scripts/setup.sh installs Debian's docker-compose")


def clean_env(**variables: str) -> dict[str, str]:
    """This process's environment without the RAAS_/ANTHROPIC_ settings the test session set, plus
    ``variables``: compose reads its ${...} from here."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("RAAS_", "ANTHROPIC_", "POSTGRES_"))}
    return {**kept, **variables}
