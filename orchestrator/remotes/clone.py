"""Cloning a tenant's repository at a branch, with the tenant's credential, as a bare repository.

Only network transports are accepted (https, http, ssh and scp-like ``user@host:path``): a
local path or ``file://`` would let a tenant clone the coordinator's own disk (another project's
workspace). Git's failures become one line naming what is wrong (unreachable, refused
credential, no such repository or branch), with the secret scrubbed from whatever git said.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.remotes.credentials import Credential, git_auth, scrub
from shared.errors import InvalidInput

CLONE_TIMEOUT_S = 600.0
_SCP_LIKE = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/:].*|/.+)$")
_REF = re.compile(r"^(?!/)(?!.*//)(?!.*\.\.)(?!.*@\{)(?!.*\.lock$)[A-Za-z0-9._/-]+(?<![/.])$")
# Every transport but these is refused inside git too (ext::, file, fd, ...), redirects included;
# a push to the same remote (orchestrator.delivery.push) allows the same ones.
NETWORK_TRANSPORTS = [
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.https.allow=always",
    "-c",
    "protocol.http.allow=always",
    "-c",
    "protocol.ssh.allow=always",
]
_PROTOCOLS = [
    *NETWORK_TRANSPORTS,
    "-c",
    "http.lowSpeedLimit=1000",
    "-c",
    "http.lowSpeedTime=60",
]
_GIT_BASE = ["-c", "core.hooksPath=/dev/null", "-c", "init.defaultBranch=main", "-c", "safe.directory=*"]


@dataclass(frozen=True)
class Remote:
    """A repository URL we accept, and the host its credential is looked up by."""

    url: str
    host: str


def parse_remote(url: str) -> Remote:
    """Check a repository URL and find its host.

    Raises:
        InvalidInput: not a network git URL, or it carries a password or an HTTPS user name
            (the message never repeats the URL then).
    """
    url = url.strip()
    if not url or any(c in url for c in "\x00\n\r \t"):
        msg = "repo: give a git URL (https://host/owner/repo.git or git@host:owner/repo.git)"
        raise InvalidInput(msg)
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http", "ssh"):
            msg = f"repo: {parts.scheme}:// is not supported; use https://, http:// or ssh://"
            raise InvalidInput(msg)
        if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
            msg = (
                "repo: the URL carries a user name or password; give the URL without it and store "
                "the credential with `raas credentials set HOST`"
            )
            raise InvalidInput(msg)
        if not parts.hostname or not parts.path.strip("/"):
            msg = f"repo: {url!r} names no host or no repository path"
            raise InvalidInput(msg)
        host = parts.netloc.rpartition("@")[2].lower()
        return Remote(url=url, host=host)
    match = _SCP_LIKE.match(url)
    if match is None:
        msg = f"repo: {url!r} is not a git URL (no local paths); give https://... or user@host:path"
        raise InvalidInput(msg)
    return Remote(url=url, host=match["host"].lower())


def check_ref(ref: str) -> str:
    """A branch name as given to ``--ref`` (``refs/heads/`` is dropped).

    Raises:
        InvalidInput: it is not a valid branch name.
    """
    name = ref.strip().removeprefix("refs/heads/")
    if not _REF.match(name) or name.startswith("-"):
        msg = f"ref: {ref!r} is not a branch name"
        raise InvalidInput(msg)
    return name


def _run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args, env=env, cwd=cwd, capture_output=True, text=True, timeout=CLONE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        msg = f"git did not finish within {CLONE_TIMEOUT_S:.0f} s"
        raise InvalidInput(msg) from exc


def _describe(stderr: str, remote: Remote, ref: str | None, credential: Credential | None) -> str:
    """Git's failure as one line naming what is wrong and what to do."""
    text = scrub(stderr, credential)
    lowered = text.lower()
    if ref is not None and ("remote branch" in lowered and "not found" in lowered):
        return f"repo: {remote.url} has no branch {ref!r}; give an existing branch with --ref"
    if "couldn't find remote ref" in lowered:
        return f"repo: {remote.url} has no branch {ref!r}; give an existing branch with --ref"
    if any(
        s in lowered
        for s in ("authentication failed", "could not read username", "could not read password", "error: 401")
    ) or ("permission denied" in lowered and "publickey" in lowered):
        if credential is None:
            return (
                f"repo: {remote.host} asks for a credential and none is stored for it; "
                f"set one with `raas credentials set {remote.host} --username USER --token-file FILE`"
            )
        return (
            f"repo: {remote.host} refused the stored credential (user {credential.username!r}); "
            f"check it and set it again with `raas credentials set {remote.host}`"
        )
    if any(
        s in lowered
        for s in (
            "could not resolve host",
            "failed to connect",
            "connection refused",
            "couldn't connect",
            "timed out",
            "no route to host",
            "could not resolve hostname",
            "network is unreachable",
        )
    ):
        return (
            f"repo: {remote.url} is unreachable ({_last_line(text)}); check the URL and that the host is up"
        )
    if "not found" in lowered or "does not appear to be a git repository" in lowered or "404" in lowered:
        return f"repo: no repository at {remote.url}; check the URL"
    return f"repo: cloning {remote.url} failed: {_last_line(text)}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "git gave no reason").removeprefix("fatal: ")


def git_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a git process on the coordinator: none of the machine's git config."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        **extra,
    }


def clone_branch(
    remote: Remote, ref: str | None, credential: Credential | None, dest: Path
) -> tuple[str, str]:
    """Clone ``ref`` (the remote's default branch when None) of ``remote`` into the bare
    repository ``dest``: the branch's full history, so that a delivery can push a fast-forward on
    top of it, and nothing else (no tags, no other branches, no remote left configured).

    Returns:
        The branch cloned and the commit it points at.

    Raises:
        InvalidInput: the repository is unreachable, refuses the credential, or has no such branch.
    """
    branch = ["--branch", ref] if ref is not None else []
    with git_auth(credential) as (options, env):
        done = _run(
            [
                "git",
                *_GIT_BASE,
                *_PROTOCOLS,
                *options,
                "clone",
                "--quiet",
                "--bare",
                "--single-branch",
                "--no-tags",
                *branch,
                "--",
                remote.url,
                str(dest),
            ],
            git_env(env),
        )
    if done.returncode != 0:
        raise InvalidInput(_describe(done.stderr, remote, ref, credential))
    local = git_env({})
    head = _run(["git", *_GIT_BASE, "symbolic-ref", "--short", "HEAD"], local, cwd=dest)
    name = ref or head.stdout.strip()
    sha = _run(
        ["git", *_GIT_BASE, "rev-parse", "--verify", "-q", f"refs/heads/{name}^{{commit}}"], local, cwd=dest
    )
    if head.returncode or sha.returncode or not name:
        msg = f"repo: {remote.url} has no commits on {ref or 'its default branch'}; push one first"
        raise InvalidInput(msg)
    _run(["git", *_GIT_BASE, "remote", "remove", "origin"], local, cwd=dest)
    return name, sha.stdout.strip()
