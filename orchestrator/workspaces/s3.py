"""Workspaces in an object store, with a generation per workspace in the database.

The truth is a bundle (``git bundle create --all``: every ref, ``refs/raas/*`` included) in the
bucket and the row of ``workspace_heads`` that names it. Each replica keeps a bare repository
per project in its cache directory, with the generation it holds in ``raas-generation``; losing
the directory loses nothing.

A write locks the row (``SELECT ... FOR UPDATE``) for its whole length, so writers of one
workspace take turns on every replica; brings the cache to the row's generation; lets the caller
change the repository; uploads a new bundle under a new key; points the row at it with the next
generation and commits; then a background thread deletes the bundle it replaced. A crash before
the commit leaves an orphan object, never a row naming a missing one. A read compares the row's
generation with the cache's and, when the cache is behind, fetches the bundle into it
(``--prune``: refs a failed write left behind go too). One file lock per project keeps this
host's threads from refreshing a cache while another changes it.

A full bundle per write, not a base and increments: one object answers every read with one GET,
nothing needs compacting, and an object lost or orphaned is one file. Its cost grows with the
repository (a write uploads all of it), which the workspace limits (200 MiB) keep bounded.
"""

from __future__ import annotations

import fcntl
import logging
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.workspaces.objects import Bucket, ObjectMissing
from shared.db import session_scope
from shared.errors import GitError, ServiceUnavailable
from shared.git import git
from shared.models.base import utcnow
from shared.models.workspaces import WorkspaceHead

log = logging.getLogger(__name__)
GENERATION_FILE = "raas-generation"
# A read that keeps losing the race with writers (each deleting the object it was about to get).
READ_ATTEMPTS = 5


class S3Store:
    def __init__(self, bucket: Bucket, cache_dir: Path, database_url: str | None = None) -> None:
        self.bucket = bucket
        self.cache_dir = cache_dir
        self.database_url = database_url
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="raas-workspace-delete")

    def path(self, project_id: str) -> Path:
        return self.cache_dir / f"{project_id}.git"

    def read(self, project_id: str) -> Path:
        bare = self.path(project_id)
        for _ in range(READ_ATTEMPTS):
            with session_scope(self.database_url) as session:
                head = session.get(WorkspaceHead, project_id)
                generation, key = (head.generation, head.object_key) if head else (0, None)
            if key is None or cached_generation(bare) >= generation:
                return bare
            with self._local_lock(project_id):
                if cached_generation(bare) >= generation:
                    return bare
                try:
                    self._sync(bare, key, generation)
                except ObjectMissing:
                    continue  # a newer write replaced it: read the row again
                return bare
        msg = f"workspace {project_id}: could not read it while it kept changing; try again"
        raise ServiceUnavailable(msg)

    @contextmanager
    def write(self, project_id: str) -> Iterator[Path]:
        bare = self.path(project_id)
        with self._local_lock(project_id):
            with session_scope(self.database_url) as session:
                head = _locked_head(session, project_id)
                if head.object_key is None:
                    shutil.rmtree(bare, ignore_errors=True)
                elif cached_generation(bare) != head.generation:
                    try:
                        self._sync(bare, head.object_key, head.generation)
                    except ObjectMissing as exc:
                        # Under the row's lock no writer replaced it: something outside deleted it.
                        msg = (
                            f"workspace {project_id}: its bundle {head.object_key} is missing from the "
                            "object store; restore it (e.g. from the bucket's versioning) and try again"
                        )
                        raise ServiceUnavailable(msg) from exc
                # Until the new state is published, the cache may hold what the store does not.
                _set_generation(bare, None)
                yield bare
                replaced = head.object_key
                key = self._upload(project_id, bare, head.generation + 1)
                if key is not None:
                    head.generation += 1
                    head.object_key = key
                    head.updated_at = utcnow()
            _set_generation(bare, head.generation or None)
        if key is not None and replaced is not None:
            # Off the write's path: the row already names the new object, the old one is garbage.
            self._deleter.submit(self._forget, replaced)

    def discard(self, project_id: str) -> None:
        with self._local_lock(project_id):
            with session_scope(self.database_url) as session:
                head = session.get(WorkspaceHead, project_id, with_for_update=True)
                key = head.object_key if head else None
                if head is not None:
                    session.delete(head)
            shutil.rmtree(self.path(project_id), ignore_errors=True)
        if key is not None:
            self._forget(key)

    def _sync(self, bare: Path, key: str, generation: int) -> None:
        """Bring the cache to ``generation`` from its bundle.

        Raises:
            ObjectMissing: the bundle is gone (a newer write replaced it).
        """
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="raas-ws-", dir=self.cache_dir) as tmp:
            bundle = Path(tmp) / "workspace.bundle"
            self.bucket.get(key, bundle)
            if not (bare / "HEAD").is_file():
                shutil.rmtree(bare, ignore_errors=True)
                git(self.cache_dir, "init", "-q", "--bare", "--initial-branch=main", str(bare))
            _set_generation(bare, None)
            git(bare, "fetch", "-q", "--prune", "--force", "--no-tags", str(bundle), "refs/*:refs/*")
        _set_generation(bare, generation)

    def _upload(self, project_id: str, bare: Path, generation: int) -> str | None:
        """Put the repository's state under a new key and return it; None when there is nothing
        to keep (no repository, or one without refs)."""
        if not (bare / "HEAD").is_file():
            return None
        with tempfile.TemporaryDirectory(prefix="raas-ws-", dir=self.cache_dir) as tmp:
            bundle = Path(tmp) / "workspace.bundle"
            try:
                git(bare, "bundle", "create", "-q", str(bundle), "--all")
            except GitError:
                if git(bare, "for-each-ref", "--count=1"):
                    raise
                return None
            # A fresh name each time: a writer that crashed after its upload never collides with
            # the next writer of the same generation.
            key = self.bucket.location.key(f"{project_id}/{generation:012d}-{secrets.token_hex(4)}.bundle")
            self.bucket.put(key, bundle)
        return key

    def _forget(self, key: str) -> None:
        try:
            self.bucket.delete(key)
        except ServiceUnavailable as exc:
            # An orphan costs storage, not correctness: the row names another object.
            log.warning("could not delete the replaced workspace object %s: %s", key, exc)

    @contextmanager
    def _local_lock(self, project_id: str) -> Iterator[None]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / f"{project_id}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def cached_generation(bare: Path) -> int:
    """The generation the cache holds; 0 when unknown (no cache, or a write left it unfinished)."""
    try:
        return int((bare / GENERATION_FILE).read_text())
    except (OSError, ValueError):
        return 0


def _set_generation(bare: Path, generation: int | None) -> None:
    marker = bare / GENERATION_FILE
    if generation is None:
        marker.unlink(missing_ok=True)
    elif bare.is_dir():
        marker.write_text(str(generation))


def _locked_head(session: Session, project_id: str) -> WorkspaceHead:
    """The workspace's row, made if missing, locked until the session ends."""
    values = {"project_id": project_id, "generation": 0, "object_key": None, "updated_at": utcnow()}
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(WorkspaceHead).values(**values)
    # One round trip: a row that exists is "updated" to itself, which locks it as FOR UPDATE would.
    upsert = insert.on_conflict_do_update(
        index_elements=[WorkspaceHead.project_id], set_={"project_id": insert.excluded.project_id}
    )
    return session.execute(
        upsert.returning(WorkspaceHead), execution_options={"populate_existing": True}
    ).scalar_one()
