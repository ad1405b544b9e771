"""The workspaces the coordinator owns: one bare git repository per project.

Workers never share a filesystem with the coordinator. They download the workspace as a git
bundle and upload their iteration's commits as a bundle; the coordinator verifies the bundle,
keeps it under ``refs/raas/iterations/<id>`` and moves ``main`` forward only from the commit
the iteration started on (a compare-and-swap), so every change has an author and a diff.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from shared.errors import Conflict, InvalidInput
from shared.git import RESULT_REF, GitError, changed_files, commit_all, git

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
MAX_FILES = 20_000
BRANCH = "refs/heads/main"


def repo_path(workspaces_dir: Path, project_id: str) -> Path:
    return workspaces_dir / f"{project_id}.git"


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    if name.startswith("/") or ".." in Path(name).parts:
        msg = f"upload: {name!r} points outside the project directory; upload a plain directory"
        raise InvalidInput(msg)
    if not (member.isfile() or member.isdir()):
        msg = f"upload: {name!r} is a link or special file; only regular files and directories are allowed"
        raise InvalidInput(msg)


def unpack_upload(archive: Path, dest: Path) -> None:
    """Extract a gzipped tar of a project directory, refusing anything that could escape.

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
            for member in members:
                _check_member(member)
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        msg = f"upload: not a readable .tar.gz archive ({exc})"
        raise InvalidInput(msg) from exc


def create_repo(workspaces_dir: Path, project_id: str, files_dir: Path) -> str:
    """Create the project's bare repository with ``files_dir`` as its first commit; return its sha."""
    bare = repo_path(workspaces_dir, project_id)
    workspaces_dir.mkdir(parents=True, exist_ok=True)
    git(workspaces_dir, "init", "-q", "--bare", str(bare))
    git(files_dir, "init", "-q")
    commit_all(files_dir, "Initial workspace", "raas", "raas@constellation.local", allow_empty=True)
    sha = git(files_dir, "rev-parse", "HEAD")
    git(files_dir, "push", "-q", str(bare), f"HEAD:{BRANCH}")
    shutil.rmtree(files_dir / ".git")
    return sha


def write_bundle(workspaces_dir: Path, project_id: str, dest: Path) -> None:
    """A bundle of the project's ``main`` branch, for a worker to clone."""
    git(repo_path(workspaces_dir, project_id), "bundle", "create", "-q", str(dest), "main")


def accept_bundle(
    workspaces_dir: Path, project_id: str, iteration_id: str, base_sha: str, bundle: Path
) -> tuple[str, list[str]]:
    """Store an iteration's commits and fast-forward ``main`` to them.

    Returns:
        The new head and the files the iteration changed.

    Raises:
        InvalidInput: the bundle is not valid or does not build on ``base_sha``.
        Conflict: ``main`` moved since the iteration started.
    """
    bare = repo_path(workspaces_dir, project_id)
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


def export_tree(workspaces_dir: Path, project_id: str, dest: Path, rev: str = "main") -> None:
    """Check out ``rev`` of the workspace into ``dest`` (which must not exist or be empty)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "tree.tar"
        git(repo_path(workspaces_dir, project_id), "archive", "-o", str(archive), rev)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")


def diff(workspaces_dir: Path, project_id: str, base: str, new: str) -> str:
    return git(repo_path(workspaces_dir, project_id), "diff", base, new)


def root_commit(workspaces_dir: Path, project_id: str) -> str:
    return git(repo_path(workspaces_dir, project_id), "rev-list", "--max-parents=0", "main").splitlines()[-1]
