"""A submission parses its raas.toml once on each side: once in `raas submit`, once on the
coordinator behind POST /v1/projects, whether the project is a directory (with a SCUD graph) or
a repository named in raas.toml's [source]. The parses are counted on the real TOML parser: the
CLI's run in the test's thread, the coordinator's in the API server's threads."""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.client import ApiClient
from shared.db import session_scope
from shared.models import Project
from tests.support.engine import Engine, engine
from tests.support.git_server import GitServer, serve_git
from tests.support.records import text as say

pytestmark = [pytest.mark.integration]

SCUD = "@nodes\napp:1 | Write notes | pending\napp:2 | Review notes | pending\n\n@edges\napp:2 -> app:1\n"


class Parses:
    """Every raas.toml parse, by the thread that made it."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def cli(self) -> int:
        return self.threads.count(threading.main_thread().ident or 0)

    def coordinator(self) -> int:
        return len(self.threads) - self.cli()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Parses:
    counted = Parses()
    real = tomllib.loads

    def loads(text: str, **kwargs: Any) -> dict[str, Any]:
        counted.threads.append(threading.get_ident())
        return real(text, **kwargs)

    monkeypatch.setattr(tomllib, "loads", loads)
    return counted


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    with serve_git(tmp_path / "served") as server:
        yield server


def _submit(eng: Engine, directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    client = ApiClient(eng.settings.coordinator_url, eng.settings.api_token.get_secret_value())
    monkeypatch.setattr("orchestrator.cli.projects.api", lambda: client)
    try:
        result = CliRunner().invoke(app, ["submit", str(directory)])
    finally:
        client.close()
    assert result.exit_code == 0, result.output
    return result.output.strip()


def _config(project_id: str) -> dict[str, Any]:
    with session_scope() as session:
        project = session.get(Project, project_id)
        assert project is not None
        return dict(project.config)


def test_a_directory_with_a_scud_graph_is_parsed_once_by_the_cli_and_once_by_the_coordinator(
    database_url: str, redis_url: str, tmp_path: Path, parses: Parses, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a project directory whose tasks come from its SCUD graph
    directory = tmp_path / "notes"
    (directory / ".scud" / "tasks").mkdir(parents=True)
    (directory / "PROMPT.md").write_text("Write notes.\n")
    (directory / "raas.toml").write_text('completion_marker = "DONE"\nmax_iterations = 3\n')
    (directory / ".scud" / "tasks" / "tasks.scg").write_text(SCUD)
    with engine({"responses": [say("unused")]}, tmp_path / "engine") as eng:
        # When `raas submit` uploads it and the coordinator creates and starts the project
        project_id = _submit(eng, directory, monkeypatch)

    # Then each side parsed raas.toml once, and what it parsed is the project's config
    assert (parses.cli(), parses.coordinator()) == (1, 1)
    config = _config(project_id)
    assert (config["completion_marker"], config["max_iterations"]) == ("DONE", 3)
    assert [task["id"] for task in config["tasks"]] == ["app:1", "app:2"]


def test_a_repository_named_in_raas_toml_is_parsed_once_by_the_cli_and_once_by_the_coordinator(
    database_url: str,
    redis_url: str,
    tmp_path: Path,
    git_server: GitServer,
    parses: Parses,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a directory whose raas.toml names the repository the project starts from
    url = git_server.create_repo("app", {"README.md": "hello\n", "PROMPT.md": "From the repository.\n"})
    directory = tmp_path / "settings"
    directory.mkdir()
    (directory / "raas.toml").write_text(f'max_iterations = 2\n[source]\nrepo = "{url}"\n')
    key = SecretStr(Fernet.generate_key().decode())
    with engine({"responses": [say("unused")]}, tmp_path / "engine", secret_key=key) as eng:
        client = ApiClient(eng.settings.coordinator_url, eng.settings.api_token.get_secret_value())
        credential = {"kind": "token", "username": git_server.username, "secret": git_server.password}
        client.set_credential(git_server.base_url.removeprefix("http://"), credential)
        client.close()
        assert parses.threads == []
        # When `raas submit` sends the settings and the coordinator clones the repository
        project_id = _submit(eng, directory, monkeypatch)

    # Then each side parsed raas.toml once: the source and the scud file came from that one parse
    assert (parses.cli(), parses.coordinator()) == (1, 1)
    config = _config(project_id)
    assert (config["max_iterations"], config["source"]["repo"]) == (2, url)
