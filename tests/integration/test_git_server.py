"""The tests' git server (tests/support/git_server.py) speaks real smart HTTP with basic auth:
a clone and a push with the right credential work, a wrong or missing one gets a 401 and git fails."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.git_server import GitServer, git, serve_git

pytestmark = pytest.mark.integration


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    with serve_git(tmp_path / "served") as server:
        yield server


def _askpass(tmp_path: Path, username: str, password: str) -> dict[str, str]:
    """Answers git's username and password prompts (the way a user's credential helper would)."""
    script = tmp_path / "askpass.sh"
    script.write_text(f'#!/bin/sh\ncase "$1" in Username*) echo {username};; *) echo {password};; esac\n')
    script.chmod(0o700)
    return {"GIT_ASKPASS": str(script)}


def test_clone_and_push_with_the_right_credential(git_server: GitServer, tmp_path: Path) -> None:
    files = {"src/app.py": "print('hi')\n"}
    url = git_server.create_repo("app", files, commits=3, extra_branches={"dev": {}})
    env = _askpass(tmp_path, git_server.username, git_server.password)
    work = tmp_path / "clone"
    git("clone", "--quiet", "--branch", "main", url, str(work), env=env)
    assert (work / "src/app.py").read_text() == "print('hi')\n"
    assert len(git_server.log("app", "main")) == 3
    (work / "NEW.md").write_text("new\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "agent work", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/raas/p1/t1", cwd=work, env=env)
    pushed = git_server.branches("app")
    assert set(pushed) == {"main", "dev", "raas/p1/t1"}
    assert pushed["raas/p1/t1"] == git("rev-parse", "HEAD", cwd=work)
    assert git_server.log("app", "raas/p1/t1")[0][1] == "agent work"
    assert git_server.show("app", "raas/p1/t1", "NEW.md") == "new"
    assert "ok" in git_server.auth_outcomes()
    assert "wrong" not in git_server.auth_outcomes()


@pytest.mark.parametrize("password", ["not-the-token", None])
def test_a_wrong_or_missing_credential_is_refused_with_401(
    git_server: GitServer, tmp_path: Path, password: str | None
) -> None:
    url = git_server.create_repo("app")
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **(_askpass(tmp_path, git_server.username, password) if password else {}),
    }
    done = subprocess.run(
        ["git", "clone", url, str(tmp_path / "clone")], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert not (tmp_path / "clone").exists()
    outcomes = git_server.auth_outcomes()
    assert "ok" not in outcomes
    assert ("wrong" if password else "missing") in outcomes
    assert all(r.status == 401 for r in git_server.requests)
