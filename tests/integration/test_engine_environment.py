"""A project's environment through the whole engine: iterations run in the setup's snapshot, and a
setup that fails fails the project before any model call, with nothing charged."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import docker
import pytest

from shared.models import ErrorKind, ProjectStatus
from tests.support.engine import engine
from tests.support.records import iterations, project, text, tool
from tests.support.sandboxes import RUN_ID

pytestmark = [pytest.mark.integration, pytest.mark.docker]

MARKER = "<promise>COMPLETE</promise>"


def test_iterations_run_in_the_snapshot_of_the_setup(services: dict[str, str], tmp_path: Path) -> None:
    # Given: a setup (no network needed) that builds a tool into .venv, kept by the snapshot
    setup = "mkdir -p .venv/bin && printf '#!/bin/sh\\necho built-once\\n' > .venv/bin/tool"
    setup += " && chmod +x .venv/bin/tool"
    toml = f"""completion_marker = "{MARKER}"
[environment]
setup = "{setup}"
setup_network = "none"
env = {{ RAAS_TEST_RUN = "{RUN_ID}" }}
"""
    script = {"responses": [tool("bash", {"command": ".venv/bin/tool"}), text(MARKER)]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        try:
            eng.run_to_end(project_id)
            # Then: the agent's command found the tool under its fresh checkout
            told = json.dumps(eng.requests(project_id)[1].body["messages"][-1]["content"])
            assert "built-once" in told
            assert project(project_id).status == ProjectStatus.COMPLETED
        finally:
            _remove_snapshots(RUN_ID)


def test_a_failing_setup_fails_the_project_before_any_model_call(
    services: dict[str, str], tmp_path: Path
) -> None:
    toml = '[environment]\nsetup = "echo resolving left-pad; exit 7"\nsetup_network = "none"\n'
    with engine({"responses": [text("never asked")]}, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_to_end(project_id)

        assert eng.requests(project_id) == []
        (row,) = iterations(project_id)
        assert row.error_kind == ErrorKind.ENVIRONMENT
        assert "[environment] setup exited 7" in (row.error or "")
        assert "resolving left-pad" in (row.error or "")
        ended = project(project_id)
        assert ended.status == ProjectStatus.FAILED
        assert ended.spent_usd == Decimal(0)


def _remove_snapshots(run_id: str) -> None:
    """The snapshots whose key this run's id is part of (they carry it in their variables)."""
    client = docker.from_env()
    for image in client.images.list(filters={"label": "raas.environment.key"}):
        if f"RAAS_TEST_RUN={run_id}" in (image.attrs.get("Config", {}).get("Env") or []):
            client.images.remove(image.id, force=True)
    client.close()
