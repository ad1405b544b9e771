"""``raas credentials set`` and ``raas submit --repo`` through the CLI, against a coordinator and a
worker as separate processes and the tests' git server on loopback: the project runs from the
repository's branch with the prompt given on the command line; a refused credential is one line
at submission and creates nothing; the secret is in none of the processes' logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.support.faults import wait_until
from tests.support.git_server import GitServer, git, serve_git
from tests.support.stack import Stack
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

MARKER = "NOTES_WRITTEN"
SCRIPT = {
    "responses": [
        {"content": [{"type": "tool_use", "name": "write", "input": {"path": "NOTES.md", "content": "n\n"}}]},
        {"content": [{"type": "text", "text": f"Wrote NOTES.md. {MARKER}"}]},
    ]
}


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    with serve_git(tmp_path / "served") as server:
        yield server


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {"RAAS_SECRET_KEY": Fernet.generate_key().decode()}
    running = Stack(log_dir=tmp_path / "logs", script=script, env=env).start()
    yield running
    running.stop()


def _projects() -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(Project)) or 0


def _status(project_id: str) -> ProjectStatus | None:
    with session_scope() as session:
        project = session.get(Project, project_id)
        return project.status if project is not None and project.status.is_terminal else None


def test_submit_from_a_repository_through_the_cli(
    stack: Stack, git_server: GitServer, tmp_path: Path
) -> None:
    url = git_server.create_repo(
        "app",
        {"README.md": "hi\n", "PROMPT.md": "The repo's prompt.\n", "raas.toml": "max_iterations = 1\n"},
        commits=2,
    )
    host = git_server.base_url.removeprefix("http://")
    token_file = tmp_path / "token"
    token_file.write_text(git_server.password + "\n")
    set_it = stack.cli(
        "credentials", "set", host, "--username", git_server.username, "--token-file", str(token_file)
    )
    assert set_it.returncode == 0, set_it.stderr
    listed = stack.cli("credentials", "ls")
    assert host in listed.stdout
    assert git_server.password not in listed.stdout

    prompt = tmp_path / "PROMPT.md"
    prompt.write_text("Write NOTES.md.\n")
    config = tmp_path / "cfg"
    config.mkdir()
    (config / "raas.toml").write_text(f'completion_marker = "{MARKER}"\nmax_iterations = 1\n')
    submitted = stack.cli("submit", str(config), "--repo", url, "--ref", "main", "--prompt-file", str(prompt))
    assert submitted.returncode == 0, submitted.stderr
    project_id = submitted.stdout.strip()
    assert wait_until(lambda: _status(project_id), 90, "the project to end") == ProjectStatus.COMPLETED

    with session_scope() as session:
        project = session.get(Project, project_id)
        assert project is not None
        assert project.prompt == "Write NOTES.md.\n"  # the command line's, not the repo's
        assert (project.source_repo, project.source_ref) == (url, "main")
        source_commit = project.source_commit
    assert source_commit == git_server.branches("app")["main"]
    bare = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{project_id}.git"
    assert git("rev-parse", "main~1", cwd=bare) == source_commit
    assert git("show", "main:NOTES.md", cwd=bare) == "n"
    status = stack.cli("status", project_id)
    assert f"source: {url} main at {source_commit[:12]}" in status.stdout

    # A wrong credential: one line at submission, nothing created, the secret not repeated.
    token_file.write_text("not-the-token\n")
    assert stack.cli("credentials", "set", host, "--token-file", str(token_file)).returncode == 0
    before = _projects()
    refused = stack.cli("submit", "--repo", url, "--prompt-file", str(prompt))
    assert refused.returncode != 0
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "refused the stored credential" in refused.stderr
    assert "not-the-token" not in refused.stderr
    assert _projects() == before
    assert "wrong" in git_server.auth_outcomes()

    # A URL carrying the secret is refused before it leaves the CLI (not even the access log has it).
    with_secret = url.replace("http://", f"http://{git_server.username}:{git_server.password}@")
    refused = stack.cli("submit", "--repo", with_secret, "--prompt-file", str(prompt))
    assert refused.returncode != 0
    assert "carries a user name or password" in refused.stderr
    assert git_server.password not in refused.stderr

    logs = stack.logs() + "".join(p.read_text(errors="replace") for p in stack.log_dir.glob("*.log"))
    assert git_server.password not in logs
    assert "not-the-token" not in logs


def test_raas_run_starts_from_the_repository_in_raas_toml(git_server: GitServer, tmp_path: Path) -> None:
    # A public repository: the embedded run has no stored credential and needs none.
    git_server.anonymous_read = True
    url = git_server.create_repo("app", {"README.md": "hi\n"})
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "PROMPT.md").write_text("Write NOTES.md.\n")
    toml = f'completion_marker = "{MARKER}"\nmax_iterations = 1\n[source]\nrepo = "{url}"\nref = "main"\n'
    (directory / "raas.toml").write_text(toml)
    (directory / "local-only.txt").write_text("not part of the workspace\n")
    data_dir = tmp_path / "data"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RAAS_DATABASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "RAAS_SANDBOX")
    }
    with ScriptedModelServer(Script.model_validate(SCRIPT)) as model:
        env |= {"RAAS_DATA_DIR": str(data_dir), "ANTHROPIC_BASE_URL": model.base_url, "RAAS_SANDBOX": "local"}
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(directory)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    bare = next((data_dir / "workspaces").glob("*.git"))
    source_commit = git_server.branches("app")["main"]
    assert git("rev-parse", "main~1", cwd=bare) == source_commit
    assert git("show", "main:NOTES.md", cwd=bare) == "n"
    assert git("show", "main:README.md", cwd=bare) == "hi"
    assert "local-only.txt" not in git("ls-tree", "-r", "--name-only", "main", cwd=bare)
    assert "anonymous" in git_server.auth_outcomes()
