"""A project started from a repository (issue #14 point 1): cloned over real smart HTTP with the
tenant's stored credential from the tests' git server, its workspace is the branch's commit and
its agents' commits sit on top of it; the credential is nowhere but its encrypted row (not in the
database's other rows, events, logs, the workspace repository or the sandbox); bad input at
submission is one line and creates nothing."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import select, text

from orchestrator.api.tenants import create_tenant
from orchestrator.scheduling import submission
from shared.db import session_scope
from shared.models import Base, GitCredential, Project
from tests.support.engine import Engine, engine, pack
from tests.support.git_server import GitServer, git, serve_git
from tests.support.records import bodies, everything_recorded, tool, tool_results
from tests.support.records import text as say

pytestmark = [pytest.mark.integration]


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    with serve_git(tmp_path / "served") as server:
        yield server


def _api(eng: Engine, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {eng.settings.api_token.get_secret_value()}"}
    return httpx.request(method, eng.settings.coordinator_url + path, headers=headers, timeout=60, **kwargs)


def _host(server: GitServer) -> str:
    return server.base_url.removeprefix("http://")


def _set_credential(eng: Engine, server: GitServer, password: str | None = None) -> None:
    body = {"kind": "token", "username": server.username, "secret": password or server.password}
    response = _api(eng, "PUT", f"/v1/credentials/{_host(server)}", json=body)
    assert response.status_code == 204, response.text


def _submit(eng: Engine, files: dict[str, str], **params: str) -> httpx.Response:
    return _api(eng, "POST", "/v1/projects", params={"name": "from-repo", **params}, content=pack(files))


def _everything_in_the_database() -> str:
    """Every row of every table, as text (the encrypted credential column left out)."""
    dump = []
    with session_scope() as session:
        for table in Base.metadata.sorted_tables:
            for row in session.execute(select(table)).mappings():
                dump.append(repr({k: v for k, v in row.items() if k != "secret_encrypted"}))
        dump.append(repr(session.execute(text("SELECT secret_encrypted FROM git_credentials")).all()))
    return "\n".join(dump)


@pytest.mark.docker
def test_a_project_from_a_repository_starts_from_its_branch_and_never_sees_the_credential(
    services: dict[str, str], git_server: GitServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = git_server.create_repo(
        "app",
        {
            "README.md": "hello from the repo\n",
            "PROMPT.md": "Add NOTES.md.\n",
            "raas.toml": 'completion_marker = "TASK_COMPLETE"\nmax_iterations = 1\n',
        },
        commits=2,
        extra_branches={"feature": {"feature.txt": "on the feature branch\n"}},
    )
    secret = git_server.password
    half = len(secret) // 2
    # The sandbox looks for the secret without the command holding it whole (the command is
    # recorded in the messages, which are searched for it too).
    look = (
        f"cat feature.txt README.md; ls -a; git remote -v 2>&1; cat .git/config 2>&1; env | sort; "
        f'A={secret[:half]}; B={secret[half:]}; grep -rl "$A$B" / --exclude-dir=proc --exclude-dir=sys '
        "2>/dev/null | sed 's/^/FOUND:/' | head -5; echo searched"
    )
    script = {
        "responses": [
            tool("bash", {"command": look}),
            tool("write", {"path": "NOTES.md", "content": "notes\n"}),
            say("Added NOTES.md. TASK_COMPLETE"),
        ]
    }
    key = Fernet.generate_key().decode()
    with engine(script, tmp_path, secret_key=SecretStr(key)) as eng:
        _set_credential(eng, git_server)
        response = _submit(eng, {}, repo=url, ref="feature")
        assert response.status_code == 201, response.text
        project_id = response.json()["id"]
        submission.start_project(project_id, eng.dispatcher, eng.bus)
        eng.run_next(project_id)

        source_commit = git_server.branches("app")["feature"]
        with session_scope() as session:
            project = session.get(Project, project_id)
            assert project is not None
            assert (project.source_repo, project.source_ref, project.source_commit) == (
                url,
                "feature",
                source_commit,
            )
            assert project.prompt == "Add NOTES.md.\n"  # the repository's PROMPT.md and raas.toml
            assert project.config["completion_marker"] == "TASK_COMPLETE"
            assert project.status.value == "completed"
            assert project.config["source"] == {"repo": url, "ref": "feature"}
        bare = eng.settings.workspaces_dir() / f"{project_id}.git"
        # The agents' commit sits on top of the branch's: a delivery pushes a fast-forward.
        assert git("rev-parse", "main~1", cwd=bare) == source_commit
        assert git("show", "main:NOTES.md", cwd=bare) == "notes"
        assert git("show", "main:feature.txt", cwd=bare) == "on the feature branch"
        assert len(git("rev-list", "main", cwd=bare).splitlines()) == 4  # the branch's history too
        assert git("remote", cwd=bare) == ""
        diff = _api(eng, "GET", f"/v1/projects/{project_id}/diff").text
        assert "+++ b/NOTES.md" in diff
        assert "feature.txt" not in diff  # the project's diff starts at the branch's commit

        looked = json.dumps(tool_results(bodies(eng, project_id)[1]["messages"][-1]))
        assert "on the feature branch" in looked
        assert "hello from the repo" in looked
        assert "searched" in looked
        assert "FOUND:" not in looked
        assert _host(git_server) not in looked  # no remote, no URL in the sandbox
        assert secret not in looked
        assert "RAAS_GIT" not in looked

        assert "ok" in git_server.auth_outcomes()
        assert secret not in _everything_in_the_database()
        assert secret not in everything_recorded(eng, project_id)
        with session_scope() as session:
            stored = session.scalars(
                select(GitCredential).where(GitCredential.host == _host(git_server))
            ).one()
            assert Fernet(key.encode()).decrypt(stored.secret_encrypted.encode()).decode() == secret
        for path in bare.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
                assert _host(git_server).encode() not in path.read_bytes(), path
        assert secret not in caplog.text
        listed = _api(eng, "GET", "/v1/credentials").json()
        # Other tests' credentials (the cluster's, other servers) may be listed too.
        assert _host(git_server) in {credential["host"] for credential in listed}
        assert secret not in repr(listed)


def _nothing_created(eng: Engine, before: int) -> None:
    with session_scope() as session:
        assert len(session.scalars(select(Project)).all()) == before
    workspaces = eng.settings.workspaces_dir()
    assert not workspaces.exists() or list(workspaces.iterdir()) == []


def _projects() -> int:
    with session_scope() as session:
        return len(session.scalars(select(Project)).all())


def test_bad_repositories_are_refused_in_one_line_and_create_nothing(
    database_url: str, redis_url: str, git_server: GitServer, tmp_path: Path
) -> None:
    url = git_server.create_repo("app", {"PROMPT.md": "Do it.\n"})
    submodules = git_server.create_repo("subs", {"PROMPT.md": "x\n", ".gitmodules": '[submodule "a"]\n'})
    lfs = git_server.create_repo(
        "lfs", {"PROMPT.md": "x\n", "assets/.gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n"}
    )
    no_prompt = git_server.create_repo("bare-app", {"main.py": "print(1)\n"})
    unreachable = f"http://127.0.0.1:{_closed_port()}/app.git"
    key = Fernet.generate_key().decode()
    with engine({"responses": [say("unused")]}, tmp_path, secret_key=SecretStr(key)) as eng:
        before = _projects()
        cases: list[tuple[dict[str, str], tuple[str, ...]]] = [
            ({"repo": url}, (_host(git_server), "none is stored", "raas credentials set")),
        ]
        for params, expected in cases:
            _refused(eng, params, expected, before)
        _set_credential(eng, git_server, password="not-the-token")
        _refused(eng, {"repo": url}, (_host(git_server), "refused the stored credential"), before)
        assert "wrong" in git_server.auth_outcomes()
        _set_credential(eng, git_server)
        cases = [
            ({"repo": unreachable}, ("unreachable", unreachable)),
            ({"repo": url, "ref": "no-such-branch"}, ("has no branch 'no-such-branch'",)),
            ({"repo": submodules}, ("submodules",)),
            ({"repo": lfs}, ("Git LFS", "assets/.gitattributes")),
            ({"repo": no_prompt}, ("no PROMPT.md",)),
            (
                {"repo": f"http://alice:{git_server.password}@{_host(git_server)}/app.git"},
                ("carries a user",),
            ),
            ({"repo": "file:///etc"}, ("file:// is not supported",)),
            ({"repo": "/var/lib/raas/workspaces/x.git"}, ("not a git URL",)),
            ({"repo": url, "ref": "../x"}, ("is not a branch name",)),
        ]
        for params, expected in cases:
            _refused(eng, params, expected, before)
        response = _submit(eng, {"PROMPT.md": "x", "src/extra.py": "1\n"}, repo=url)
        assert response.status_code == 422
        assert "only PROMPT.md and raas.toml" in response.json()["detail"]
        _nothing_created(eng, before)


def _refused(eng: Engine, params: dict[str, str], expected: tuple[str, ...], before: int) -> None:
    response = _submit(eng, {}, **params)
    assert response.status_code == 422, (params, response.text)
    detail = response.json()["detail"]
    assert "\n" not in detail
    for fragment in expected:
        assert fragment in detail, (params, detail)
    assert "not-the-token" not in detail
    _nothing_created(eng, before)


def _closed_port() -> int:
    from tests.support.loopback import free_port

    return free_port()


def test_credentials_are_refused_without_an_operator_key(
    database_url: str, redis_url: str, git_server: GitServer, tmp_path: Path
) -> None:
    with engine({"responses": [say("unused")]}, tmp_path, secret_key=None, secret_key_file=None) as eng:
        body = {"kind": "token", "username": "u", "secret": "s3cret-value"}
        response = _api(eng, "PUT", f"/v1/credentials/{_host(git_server)}", json=body)
        assert response.status_code == 422
        assert "RAAS_SECRET_KEY" in response.json()["detail"]
        with session_scope() as session:
            assert (
                session.scalars(select(GitCredential).where(GitCredential.host == _host(git_server))).all()
                == []
            )


def test_a_tenants_credential_serves_only_that_tenant(
    database_url: str, redis_url: str, git_server: GitServer, tmp_path: Path
) -> None:
    url = git_server.create_repo("app", {"PROMPT.md": "Do it.\n"})
    suffix = secrets.token_hex(4)
    _, token_a = create_tenant(f"repo-a-{suffix}")
    _, token_b = create_tenant(f"repo-b-{suffix}")
    key = Fernet.generate_key().decode()
    with engine({"responses": [say("unused")]}, tmp_path, secret_key=SecretStr(key)) as eng:

        def call(token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.request(
                method, eng.settings.coordinator_url + path, headers=headers, timeout=60, **kwargs
            )

        body = {"kind": "token", "username": git_server.username, "secret": git_server.password}
        assert call(token_a, "PUT", f"/v1/credentials/{_host(git_server)}", json=body).status_code == 204
        assert call(token_b, "GET", "/v1/credentials").json() == []
        params = {"name": "p", "repo": url}
        refused = call(token_b, "POST", "/v1/projects", params=params, content=pack({}))
        assert refused.status_code == 422
        assert "none is stored" in refused.json()["detail"]
        created = call(token_a, "POST", "/v1/projects", params=params, content=pack({}))
        assert created.status_code == 201, created.text
        assert created.json()["source_ref"] == "main"
        assert call(token_b, "DELETE", f"/v1/credentials/{_host(git_server)}").status_code == 404
        assert call(token_a, "DELETE", f"/v1/credentials/{_host(git_server)}").status_code == 204
        assert call(token_a, "GET", "/v1/credentials").json() == []


def test_a_credential_stored_under_another_key_is_named_not_used(
    database_url: str, redis_url: str, git_server: GitServer, tmp_path: Path
) -> None:
    url = git_server.create_repo("app", {"PROMPT.md": "Do it.\n"})
    with engine(
        {"responses": [say("unused")]}, tmp_path / "a", secret_key=SecretStr(Fernet.generate_key().decode())
    ) as eng:
        _set_credential(eng, git_server)
    with engine(
        {"responses": [say("unused")]}, tmp_path / "b", secret_key=SecretStr(Fernet.generate_key().decode())
    ) as eng:
        before = _projects()
        response = _submit(eng, {}, repo=url)
        assert response.status_code == 422
        detail = response.json()["detail"]
        assert detail.startswith(f"the credential for {_host(git_server)} cannot be decrypted")
        assert detail.endswith("with this coordinator's key; set it again")
        assert git_server.requests == []  # nothing was sent to the server
        _nothing_created(eng, before)
        _set_credential(eng, git_server)
        assert _submit(eng, {}, repo=url).status_code == 201
