"""A project's workspace started from a tenant's repository (``raas submit --repo``, ``[source]``).

The coordinator clones the branch with the tenant's credential into a temporary bare repository,
checks what it cannot support (submodules, Git LFS), reads PROMPT.md and raas.toml from it unless
the command line gave them, and only then makes the project's workspace: a bare repository whose
``main`` is the branch's commit, with its history, so that the agents' first commit sits on top of
it and a delivery can push a fast-forward. The workspace has no remote: workers get bundles of
``main``, and no URL or credential ever leaves the coordinator.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from orchestrator.remotes.clone import Remote, check_ref, clone_branch, git_env, parse_remote
from orchestrator.remotes.credentials import get_credential
from orchestrator.scheduling import workspace
from shared.errors import GitError, InvalidInput
from shared.git import git
from shared.settings import Settings

#: The ref in a workspace that marks the commit the project started from (its diffs start there).
BASE_REF = workspace.BASE_REF
# Files of an upload that may come with --repo: the repository is the workspace.
OVERLAY_FILES = frozenset({"PROMPT.md", "raas.toml"})
MAX_SERVICE_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Source:
    """A cloned branch, waiting in ``clone`` (a temporary bare repository) to become a workspace."""

    remote: Remote
    ref: str
    commit: str
    clone: Path


def clone_source(
    session: Session, settings: Settings, tenant_id: str | None, repo: str, ref: str | None, tmp: Path
) -> Source:
    """Clone ``ref`` of ``repo`` with the tenant's credential for its host into ``tmp``.

    Raises:
        InvalidInput: a bad URL or branch name, an unreachable repository, a refused credential,
            a missing branch, submodules or LFS (one line each).
    """
    remote = parse_remote(repo)
    branch = check_ref(ref) if ref else None
    credential = get_credential(session, settings, tenant_id, remote.host)
    dest = tmp / "source.git"
    name, commit = clone_branch(remote, branch, credential, dest)
    _refuse_unsupported(dest, commit, remote)
    _refuse_too_large(dest, commit, remote)
    return Source(remote=remote, ref=name, commit=commit, clone=dest)


def _refuse_unsupported(bare: Path, commit: str, remote: Remote) -> None:
    """Submodules and LFS would leave the agents a workspace with holes in it: refuse them."""
    names = git(bare, "ls-tree", "-r", "-z", "--name-only", commit).split("\0")
    if ".gitmodules" in names or "160000" in git(bare, "ls-tree", "-r", commit).split():
        msg = (
            f"repo: {remote.url} uses git submodules, which are not supported; use a repository without them"
        )
        raise InvalidInput(msg)
    for name in names:
        if name == ".gitattributes" or name.endswith("/.gitattributes"):
            text = read_file(bare, commit, name) or ""
            if "filter=lfs" in text.replace(" ", ""):
                msg = (
                    f"repo: {remote.url} stores files with Git LFS ({name} has filter=lfs), which is "
                    "not supported; use a repository without LFS"
                )
                raise InvalidInput(msg)


def _refuse_too_large(bare: Path, commit: str, remote: Remote) -> None:
    """The limits of an upload hold for a repository too: every iteration's worker gets the
    workspace (its history included) as a bundle."""
    files = len(git(bare, "ls-tree", "-r", "-z", "--name-only", commit).split("\0")) - 1
    if files > workspace.MAX_FILES:
        msg = f"repo: {remote.url} has {files} files, more than the limit of {workspace.MAX_FILES}"
        raise InvalidInput(msg)
    counts = dict(
        line.split(": ", 1) for line in git(bare, "count-objects", "-v").splitlines() if ": " in line
    )
    packed = (int(counts.get("size", 0)) + int(counts.get("size-pack", 0))) * 1024
    if packed > workspace.MAX_UPLOAD_BYTES:
        limit = workspace.MAX_UPLOAD_BYTES // (1024 * 1024)
        msg = f"repo: {remote.url} is larger than {limit} MiB with its history; use a smaller repository"
        raise InvalidInput(msg)


def read_file(bare: Path, commit: str, path: str) -> str | None:
    """A file's text at ``commit`` (None when it has none there), at most 1 MiB.

    Raises:
        InvalidInput: it is larger.
    """
    local = git_env({})
    size = subprocess.run(
        ["git", "cat-file", "-s", f"{commit}:{path}"], cwd=bare, env=local, capture_output=True, text=True
    )
    if size.returncode:
        return None
    if int(size.stdout.strip() or 0) > MAX_SERVICE_FILE_BYTES:
        msg = f"repo: {path} is larger than {MAX_SERVICE_FILE_BYTES // 1024} KiB"
        raise InvalidInput(msg)
    done = subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{path}"], cwd=bare, env=local, capture_output=True
    )
    return done.stdout.decode("utf-8", errors="replace")


def take_service_files(source: Source, root: Path, files: tuple[str, ...]) -> None:
    """Copy the repository's PROMPT.md, raas.toml (and SCUD graph) into ``root`` where the command
    line did not give them, so that the submission reads them the way it reads an upload."""
    for name in files:
        target = root / name
        if target.exists():
            continue
        text = read_file(source.clone, source.commit, name)
        if text is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")


def create_workspace(bare: Path, source: Source) -> str:
    """The project's bare repository with ``main`` at the source commit and no remote; its sha."""
    bare.parent.mkdir(parents=True, exist_ok=True)
    try:
        git(bare.parent, "init", "-q", "--bare", str(bare))
        git(
            bare, "fetch", "-q", "--no-tags", str(source.clone), f"refs/heads/{source.ref}:{workspace.BRANCH}"
        )
        git(bare, "update-ref", BASE_REF, source.commit)
    except GitError:
        shutil.rmtree(bare, ignore_errors=True)
        raise
    return source.commit
