"""Pushing a commit of the project's bare repository to a branch of the user's remote, never forced.

A plain push is a compare-and-swap on the remote: it moves the branch only forward from what is
there, so a push repeated after a crash is a no-op ("up to date") and a branch someone else
moved is refused, never overwritten. Whether a refused branch already holds our commit (our
earlier push, then theirs on top) is settled by fetching it into a ref of our own and asking
git whether our commit is an ancestor.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from orchestrator.remotes.clone import NETWORK_TRANSPORTS, git_env, parse_remote
from orchestrator.remotes.credentials import Credential, git_auth, scrub
from shared.errors import PushError

PUSH_TIMEOUT_S = 300.0
# Transports as a clone allows them: network ones only (no ext::, file, fd), redirects included.
_SAFE = [*NETWORK_TRANSPORTS, "-c", "core.hooksPath=/dev/null"]


class Pushed(str, Enum):
    MOVED = "moved"  # the branch is new or moved forward to the commit
    ALREADY = "already"  # it was there already (a repeated push, or the remote has it beneath newer work)
    REFUSED = "refused"  # someone else's commits are on the branch: not forced


@dataclass(frozen=True)
class PushResult:
    outcome: Pushed
    detail: str = ""


def _git(bare: Path, args: list[str], credential: Credential | None) -> subprocess.CompletedProcess[str]:
    with git_auth(credential) as (options, env):
        try:
            return subprocess.run(
                ["git", *options, *_SAFE, "-C", str(bare), *args],
                env=git_env(env),
                capture_output=True,
                text=True,
                timeout=PUSH_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"git {args[0]} did not finish within {PUSH_TIMEOUT_S:.0f} s"
            raise PushError(msg) from exc


def push_branch(
    bare: Path, remote_url: str, sha: str, branch: str, credential: Credential | None
) -> PushResult:
    """Put ``sha`` on ``refs/heads/<branch>`` of the remote without force.

    Raises:
        PushError: the remote could not be reached or refused the credential (scrubbed message).
    """
    remote = parse_remote(remote_url)
    ref = f"refs/heads/{branch}"
    done = _git(bare, ["push", "--porcelain", remote.url, f"{sha}:{ref}"], credential)
    text = scrub(done.stdout + done.stderr, credential)
    line = next((row for row in text.splitlines() if f":{ref}\t" in row), "")
    if done.returncode == 0:
        return PushResult(Pushed.ALREADY if line.startswith("=") else Pushed.MOVED)
    if line.startswith("!") and ("non-fast-forward" in line or "fetch first" in line or "rejected" in line):
        if _remote_holds(bare, remote.url, ref, sha, credential):
            return PushResult(Pushed.ALREADY)
        return PushResult(Pushed.REFUSED, line.rsplit("\t", 1)[-1])
    raise PushError(_one_line(text, remote.host, credential))


def _remote_holds(bare: Path, url: str, ref: str, sha: str, credential: Credential | None) -> bool:
    """Whether the remote's branch already has ``sha`` in its history (fetched into a ref of ours)."""
    mine = f"refs/raas/remote-check/{ref.removeprefix('refs/heads/')}"
    fetched = _git(bare, ["fetch", "--quiet", "--no-tags", url, f"+{ref}:{mine}"], credential)
    if fetched.returncode:
        return False
    holds = _git(bare, ["merge-base", "--is-ancestor", sha, mine], None)
    _git(bare, ["update-ref", "-d", mine], None)
    return holds.returncode == 0


def _one_line(text: str, host: str, credential: Credential | None) -> str:
    lowered = text.lower()
    if any(s in lowered for s in ("authentication failed", "could not read username", "error: 401", "403")):
        if credential is None:
            return (
                f"{host} asks for a credential and none is stored; set one with `raas credentials set {host}`"
            )
        return f"{host} refused the stored credential (user {credential.username!r}); set it again"
    lines = [row.strip() for row in text.splitlines() if row.strip() and not row.startswith("To ")]
    return (lines[-1] if lines else "git gave no reason").removeprefix("fatal: ").removeprefix("error: ")
