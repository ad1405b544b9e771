"""The rules of orchestrator.remotes that need no network: which URLs and branch names are
accepted, how a credential reaches git, and git's failures as one line without the secret."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.remotes.clone import Remote, _describe, check_ref, parse_remote
from orchestrator.remotes.credentials import Credential, check_host, git_auth, scrub
from shared.errors import InvalidInput
from shared.models import CredentialKind

pytestmark = pytest.mark.unit

TOKEN = Credential(
    host="git.example.org", kind=CredentialKind.TOKEN, username="bot", secret="tok-s3cr3t-value"
)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://git.example.org/team/app.git", "git.example.org"),
        ("http://127.0.0.1:8080/app.git", "127.0.0.1:8080"),
        ("ssh://git@git.example.org:2222/team/app.git", "git.example.org:2222"),
        ("git@Git.Example.org:team/app.git", "git.example.org"),
    ],
)
def test_network_urls_are_accepted_with_their_host(url: str, host: str) -> None:
    assert parse_remote(url) == Remote(url=url, host=host)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://bot:tok-s3cr3t-value@git.example.org/app.git", "carries a user name or password"),
        ("https://bot@git.example.org/app.git", "carries a user name or password"),
        ("file:///srv/raas/workspaces/other.git", "file:// is not supported"),
        ("ext::sh", "not a git URL"),
        ("fd::17", "not a git URL"),
        ("/srv/raas/workspaces/other.git", "not a git URL"),
        ("../other.git", "not a git URL"),
        ("https://git.example.org", "no repository path"),
        ("", "give a git URL"),
    ],
)
def test_other_urls_are_refused_in_one_line(url: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words) as raised:
        parse_remote(url)
    assert "s3cr3t" not in str(raised.value)


@pytest.mark.parametrize("ref", ["main", "feature/x-1", "refs/heads/release-2.0"])
def test_branch_names(ref: str) -> None:
    assert check_ref(ref) == ref.removeprefix("refs/heads/")


@pytest.mark.parametrize("ref", ["../x", "a..b", "-rf", "x.lock", "a b", "a//b", "x/", "@{1}"])
def test_not_branch_names(ref: str) -> None:
    with pytest.raises(InvalidInput, match="is not a branch name"):
        check_ref(ref)


@pytest.mark.parametrize("host", ["https://git.example.org", "bot@git.example.org", "a/b", ""])
def test_credential_hosts_are_hosts(host: str) -> None:
    with pytest.raises(InvalidInput, match="is not a git host"):
        check_host(host)


def test_git_failures_become_one_line_without_the_secret() -> None:
    remote = Remote(url="https://git.example.org/app.git", host="git.example.org")
    refused = (
        "remote: tok-s3cr3t-value\nfatal: Authentication failed for 'https://git.example.org/app.git/'\n"
    )
    assert _describe(refused, remote, None, TOKEN) == (
        "repo: git.example.org refused the stored credential (user 'bot'); check it and set it again "
        "with `raas credentials set git.example.org`"
    )
    odd = "fatal: something odd about tok-s3cr3t-value\n"
    assert "s3cr3t" not in _describe(odd, remote, None, TOKEN)
    assert scrub(odd, TOKEN) == "fatal: something odd about ***\n"
    missing = "fatal: Remote branch nope not found in upstream origin\n"
    assert "has no branch 'nope'" in _describe(missing, remote, "nope", TOKEN)
    down = "fatal: unable to access 'https://git.example.org/': Failed to connect to git.example.org\n"
    assert "is unreachable" in _describe(down, remote, None, None)


def test_the_helper_answers_git_with_the_credential_of_that_process_only(tmp_path: Path) -> None:
    with git_auth(TOKEN) as (options, env):
        done = subprocess.run(
            ["git", *options, "credential", "fill"],
            input="protocol=https\nhost=git.example.org\n\n",
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", **env},
            capture_output=True,
            text=True,
            check=True,
        )
    assert "username=bot\npassword=tok-s3cr3t-value\n" in done.stdout
    with git_auth(TOKEN) as (options, env):
        elsewhere = subprocess.run(
            ["git", *options, "credential", "fill"],
            input="protocol=https\nhost=redirected.example.net\n\n",
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", **env},
            capture_output=True,
            text=True,
        )
    assert "s3cr3t" not in elsewhere.stdout  # another host (a redirect) is not given the secret
    assert elsewhere.returncode != 0
    assert all("s3cr3t" not in option for option in options)  # never on a command line
    assert "RAAS_GIT_SECRET" not in os.environ


def test_an_ssh_key_lives_in_a_private_file_for_the_block_only() -> None:
    key = Credential(host="h", kind=CredentialKind.SSH_KEY, username="", secret="-----BEGIN KEY-----\nabc\n")
    with git_auth(key) as (_, env):
        command = env["GIT_SSH_COMMAND"]
        path = Path(command.split(" -i ")[1].split(" ")[0])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text() == "-----BEGIN KEY-----\nabc\n"
        assert "abc" not in command
    assert not path.exists()
