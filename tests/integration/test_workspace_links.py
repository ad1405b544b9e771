"""A workspace holding links is delivered whole (issue #10): `raas pull` writes every file, leaves
out the links that would lead outside the directory and names them in one warning line.

The links are made the way agents make them — `python3 -m venv`, `ln -s` — by a real iteration in
a real sandbox; the pull is the real CLI in its own process against the real coordinator API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engine import Engine, engine
from tests.support.records import bodies, iterations, text, tool, tool_results
from tests.support.trees import links_inside

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LINKS = " && ".join(
    [
        "echo kept > notes.txt",
        "python3 -m venv --without-pip .venv",  # .venv/bin/python3 -> /usr/bin/python3
        "ln -s / rootlink",
        "ln -s /etc/passwd passwd",
        "mkdir sub && ln -s .. sub/d && ln -s sub/d/.. e",  # each link inside, together outside
        "ln -s notes.txt alias.txt",
    ]
)
LEFT_OUT = [".venv/bin/python3", "rootlink", "passwd", "e"]


def _pull(eng: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RAAS_COORDINATOR_URL": eng.settings.coordinator_url,
        "RAAS_API_TOKEN": eng.settings.api_token.get_secret_value(),
    }
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "pull", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pull_delivers_a_workspace_with_a_venv_and_links_out_leaving_only_those_links_out(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given an agent that made a venv and links out of the workspace, all of it committed
    # (the project's own .gitignore does not ignore .venv)
    script = {
        "responses": [
            tool("bash", {"command": LINKS}),
            text("Made a venv and some links."),
            tool("bash", {"command": "readlink rootlink && .venv/bin/python -c 'print(\"venv works\")'"}),
            text("The venv still works."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={".gitignore": "*.log\n"})
        eng.run_next(project_id)
        assert iterations(project_id)[0].error is None
        assert ".venv/bin/python3" in iterations(project_id)[0].files_changed

        # When the workspace is pulled
        target = tmp_path / "pulled"
        pulled = _pull(eng, project_id, str(target))

        # Then every other entry is there, and one warning line names the links left out
        assert pulled.returncode == 0, pulled.stderr
        warning = pulled.stderr.strip()
        assert len(warning.splitlines()) == 1, warning
        assert warning.startswith("warning: ")
        for name in LEFT_OUT:
            assert repr(name) in warning, warning
        assert "'.venv/bin/python3' -> '/usr/bin/python3'" in warning
        assert (target / "notes.txt").read_text() == "kept\n"
        assert (target / ".gitignore").read_text() == "*.log\n"
        assert (target / ".venv/pyvenv.cfg").is_file()
        assert (target / ".venv/bin/activate").is_file()
        for name in LEFT_OUT:
            assert not os.path.lexists(target / name), name
        # And no link leads outside; the links that stay inside are kept
        links = links_inside(target)
        assert links["alias.txt"] == "notes.txt"
        assert links["sub/d"] == ".."
        assert links[".venv/bin/python"] == "python3"
        assert not set(links) & set(LEFT_OUT)

        # And --json lists them too
        again = _pull(eng, project_id, str(tmp_path / "again"), "--json")
        assert again.returncode == 0, again.stderr
        answer = json.loads(again.stdout)
        assert sorted(entry["name"] for entry in answer["left_out"]) == sorted(LEFT_OUT)
        assert answer["files"] == sum(1 for p in target.rglob("*") if p.is_file() and not p.is_symlink())

        # And in the sandbox the links are still the agent's: its next iteration uses the venv
        eng.run_next(project_id)
        (result,) = tool_results(bodies(eng, project_id)[3]["messages"][-1])
        assert result["content"] == "exit code 0\n/\nvenv works", result
