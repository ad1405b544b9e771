"""The git operations on a project's workspace: one bare git repository per project.

Workers never share a filesystem with the coordinator. They download the workspace as a git
bundle and upload their iteration's commits as a bundle; the coordinator verifies the bundle,
keeps it under ``refs/raas/iterations/<id>`` and moves ``main`` forward only from the commit
the iteration started on (a compare-and-swap), so every change has an author and a diff.

Where the repository lives is the workspace store's business (:mod:`orchestrator.workspaces`):
callers get ``bare`` from ``store.read(project_id)``, or from ``store.write(project_id)`` to
change it.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from shared.archive import Reason, unpack
from shared.errors import Conflict, GitError, InvalidInput, UnsafeMember
from shared.git import RESULT_REF, changed_files, commit_all, git

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
MAX_FILES = 20_000
BRANCH = "refs/heads/main"
# The commit a project started from when it is not its repository's root (a project from a repo).
BASE_REF = "refs/raas/base"


def unpack_upload(archive: Path, dest: Path) -> None:
    """Extract a gzipped tar of a project directory, refusing anything that could escape.

    Stricter than a pull (:func:`shared.archive.unpack` in strict mode, without links): the
    user can fix their directory, so a link or special file refuses the upload instead of being
    left out.

    Raises:
        InvalidInput: the archive is not a tar.gz, is too large, or holds links or escaping paths.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            if len(members) > MAX_FILES:
                msg = f"upload: {len(members)} files is more than the limit of {MAX_FILES}"
                raise InvalidInput(msg)
            if sum(m.size for m in members) > MAX_UPLOAD_BYTES:
                msg = f"upload: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB unpacked"
                raise InvalidInput(msg)
            unpack(tar, dest, links=False, strict=True)
    except UnsafeMember as exc:
        name, reason = exc.entry.name, exc.entry.reason
        if reason is Reason.OUTSIDE:
            msg = f"upload: {name!r} points outside the project directory; upload a plain directory"
        else:
            what = reason.description if reason is Reason.BEYOND_LINK else "is a link or special file"
            msg = f"upload: {name!r} {what}; only regular files and directories are allowed"
        raise InvalidInput(msg) from exc
    except (tarfile.TarError, EOFError, OSError) as exc:
        msg = f"upload: not a readable .tar.gz archive ({exc})"
        raise InvalidInput(msg) from exc


def create_repo(bare: Path, files_dir: Path) -> str:
    """Create the project's bare repository with ``files_dir`` as its first commit; return its sha."""
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(bare.parent, "init", "-q", "--bare", str(bare))
    git(files_dir, "init", "-q")
    commit_all(files_dir, "Initial workspace", "raas", "raas@constellation.local", allow_empty=True)
    sha = git(files_dir, "rev-parse", "HEAD")
    git(files_dir, "push", "-q", str(bare), f"HEAD:{BRANCH}")
    shutil.rmtree(files_dir / ".git")
    return sha


def write_bundle(bare: Path, dest: Path) -> None:
    """A bundle of the project's ``main`` branch, for a worker to clone."""
    git(bare, "bundle", "create", "-q", str(dest), "main")


def accept_bundle(bare: Path, iteration_id: str, base_sha: str, bundle: Path) -> tuple[str, list[str]]:
    """Store an iteration's commits and fast-forward ``main`` to them.

    Returns:
        The new head and the files the iteration changed.

    Raises:
        InvalidInput: the bundle is not valid or does not build on ``base_sha``.
        Conflict: ``main`` moved since the iteration started.
    """
    ref = f"refs/raas/iterations/{iteration_id}"
    try:
        git(bare, "bundle", "verify", "-q", str(bundle))
        git(bare, "fetch", "-q", str(bundle), f"+{RESULT_REF}:{ref}")
    except GitError as exc:
        msg = f"workspace bundle rejected: {exc}"
        raise InvalidInput(msg) from exc
    new_sha = git(bare, "rev-parse", ref)
    try:
        git(bare, "merge-base", "--is-ancestor", base_sha, new_sha)
    except GitError as exc:
        msg = f"iteration {iteration_id}: commits do not build on {base_sha[:12]}"
        raise InvalidInput(msg) from exc
    if git(bare, "rev-parse", BRANCH) == new_sha:
        # The same push again (its first answer was lost): already applied.
        return new_sha, changed_files(bare, base_sha, new_sha)
    try:
        git(bare, "update-ref", BRANCH, new_sha, base_sha)
    except GitError as exc:
        msg = f"iteration {iteration_id}: main moved since the iteration started"
        raise Conflict(msg) from exc
    return new_sha, changed_files(bare, base_sha, new_sha)


def write_archive(bare: Path, dest: Path, rev: str = "main") -> None:
    """The files of ``rev`` of the workspace as a tar (``git archive``), links and all.

    The archive says what the commit holds; whoever unpacks it on a host does so through
    :func:`shared.archive.unpack`, which leaves out the links that lead outside.
    """
    git(bare, "archive", "--format=tar", "-o", str(dest), rev)


def diff(bare: Path, base: str, new: str) -> str:
    return git(bare, "diff", base, new)


def root_commit(bare: Path) -> str:
    """The commit the project started from: the source commit of a project from a repository,
    else the workspace's first commit."""
    try:
        return git(bare, "rev-parse", "--verify", "-q", BASE_REF)
    except GitError:
        return git(bare, "rev-list", "--max-parents=0", "main").splitlines()[-1]
