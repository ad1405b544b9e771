"""Workspaces in an object store, with a generation per workspace in the database.

The truth is the workspace's rows and the objects they name: the head (``workspace_heads``)
names a base, a bundle of every ref (``git bundle create --all``: ``refs/raas/*`` included) in
the object store; each write since the base is a row of ``workspace_increments``: the refs it
changed and a pack of the objects it added (none when it only moved or deleted refs), kept in
the row when small, else in the object store. Each replica keeps a bare repository per project
in its cache directory, with the generation it holds in ``raas-generation``; losing the
directory loses nothing.

A write locks the head (``SELECT ... FOR UPDATE``) for its whole length, so writers of one
workspace take turns on every replica; brings the cache to the head's generation; lets the
caller change the repository; stores its increment and moves the head to the next generation in
one commit. Every ``COMPACT_AFTER`` writes it uploads a full bundle instead, which becomes the
new base, and a background thread deletes the objects that one replaced. A crash before the
commit leaves at most an orphan object, never a row naming a missing one. A read compares the
head's generation with the cache's: a cache a few writes behind applies their increments, a
cache older than the base or unknown takes the base (``--prune``: refs a failed write left
behind go too) and every increment after it. One file lock per project keeps this host's
threads from refreshing a cache while another changes it.

Increments and not a full bundle per write, and small ones in Postgres: a write stores what it
added, with no upload at all for an iteration's usual few files, where re-bundling and uploading
the whole repository was most of its cost (issue #29's round-trip benchmark); and a replica a
write or two behind reads as little. The price is a chain: a workspace is its base and up to
``COMPACT_AFTER - 1`` increments, and losing its base loses it until the object is restored.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.workspaces.objects import Bucket, ObjectMissing
from shared.db import session_scope
from shared.errors import ServiceUnavailable
from shared.git import git, git_to_file
from shared.models.base import utcnow
from shared.models.workspaces import WorkspaceHead, WorkspaceIncrement

log = logging.getLogger(__name__)
GENERATION_FILE = "raas-generation"
# A read that keeps losing the race with writers (each deleting the object it was about to get).
READ_ATTEMPTS = 5
# Writes from one base to the next: a workspace is at most its base and this many increments
# less one, which bounds what a read far behind applies and what the database holds for it.
COMPACT_AFTER = 16
# An object no row names, of a workspace with no head: how old it must be to be an orphan, not
# the upload of a first write still to commit (its head is not visible before it does).
ORPHAN_AGE_S = 3600.0
# The name of every object the store makes, under its prefix (see _upload).
_OBJECT_NAME = re.compile(r"(?P<project>[^/]+)/[0-9]{12}-[0-9a-f]{8}\.(?:bundle|pack)")
# An increment's pack up to this size stays in its row; a larger one goes to the object store.
INLINE_MAX_BYTES = 256 * 1024


class S3Store:
    def __init__(
        self,
        bucket: Bucket,
        cache_dir: Path,
        database_url: str | None = None,
        *,
        compact_after: int = COMPACT_AFTER,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> None:
        self.bucket = bucket
        self.cache_dir = cache_dir
        self.database_url = database_url
        self.compact_after = compact_after
        self.inline_max_bytes = inline_max_bytes
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="raas-workspace-delete")

    def path(self, project_id: str) -> Path:
        return self.cache_dir / f"{project_id}.git"

    def read(self, project_id: str) -> Path:
        bare = self.path(project_id)
        for _ in range(READ_ATTEMPTS):
            with session_scope(self.database_url) as session:
                head = session.get(WorkspaceHead, project_id)
                current = (
                    head is None or head.object_key is None or cached_generation(bare) == head.generation
                )
            if current:
                return bare
            with self._local_lock(project_id):
                try:
                    with session_scope(self.database_url) as session:
                        plan = _plan(session, project_id, bare)
                    if plan is not None:
                        self._apply(bare, plan)
                except ObjectMissing:
                    continue  # a compaction replaced what it was reading: read the head again
                return bare
        msg = f"workspace {project_id}: could not read it while it kept changing; try again"
        raise ServiceUnavailable(msg)

    @contextmanager
    def write(self, project_id: str) -> Iterator[Path]:
        bare = self.path(project_id)
        garbage: list[str] = []
        with self._local_lock(project_id):
            with session_scope(self.database_url) as session:
                head = _locked_head(session, project_id)
                if head.object_key is None:
                    shutil.rmtree(bare, ignore_errors=True)
                elif cached_generation(bare) != head.generation:
                    try:
                        plan = _plan(session, project_id, bare, head)
                        if plan is not None:
                            self._apply(bare, plan)
                    except ObjectMissing as exc:
                        # Under the head's lock no writer replaced it: something outside deleted it.
                        msg = (
                            f"workspace {project_id}: its object {exc} is missing from the object "
                            "store; restore it (e.g. from the bucket's versioning) and try again"
                        )
                        raise ServiceUnavailable(msg) from exc
                before = refs(bare)
                # Until the new state is published, the cache may hold what the store does not.
                _set_generation(bare, None)
                yield bare
                garbage = self._publish(session, bare, head, before)
            _set_generation(bare, head.generation or None)
        if garbage:
            # Off the write's path: the head already names the new base, these are garbage.
            self._deleter.submit(self._forget, garbage)

    def discard(self, project_id: str) -> None:
        with self._local_lock(project_id):
            with session_scope(self.database_url) as session:
                head = session.get(WorkspaceHead, project_id, with_for_update=True)
                keys = _keys(session, head) if head is not None else []
                if head is not None:
                    session.execute(
                        delete(WorkspaceIncrement).where(WorkspaceIncrement.project_id == project_id)
                    )
                    session.delete(head)
            shutil.rmtree(self.path(project_id), ignore_errors=True)
        self._forget(keys)

    def sweep(self) -> list[str]:
        """Delete the objects no row names: the uploads of writes that crashed before their
        commit, and what a compaction replaced when deleting it failed. Returns their keys.

        Each workspace is swept under its head's lock, so nothing unnamed can become named
        meanwhile; one being written (its head locked) is left for the next sweep. A workspace
        with no head loses only objects older than ``ORPHAN_AGE_S``.
        """
        prefix = self.bucket.location.key("")
        found: dict[str, list[tuple[str, datetime]]] = {}
        for key, written in self.bucket.listing(prefix):
            ours = _OBJECT_NAME.fullmatch(key[len(prefix) :])
            if ours:  # anything else under the prefix is not the store's to delete
                found.setdefault(ours["project"], []).append((key, written))
        old = utcnow() - timedelta(seconds=ORPHAN_AGE_S)
        swept: list[str] = []
        for project_id, objects in found.items():
            with session_scope(self.database_url) as session:
                locked = select(WorkspaceHead).where(WorkspaceHead.project_id == project_id)
                head = session.scalars(locked.with_for_update(skip_locked=True)).first()
                if head is not None:
                    named = set(_keys(session, head))
                    garbage = [key for key, _ in objects if key not in named]
                elif session.get(WorkspaceHead, project_id) is None:
                    garbage = [key for key, written in objects if written < old]
                else:
                    continue  # being written
                swept += self._forget(garbage)
        return swept

    def _publish(
        self, session: Session, bare: Path, head: WorkspaceHead, before: dict[str, str]
    ) -> list[str]:
        """Store what the write changed and move the locked head to it; the keys it replaced.

        Nothing is published when the repository has no refs (nothing to keep) or the same refs
        as before (nothing changed: the caches that hold this generation stay right).
        """
        after = refs(bare)
        if not after or after == before:
            return []
        project_id, generation = head.project_id, head.generation + 1
        replaced: list[str] = []
        if head.object_key is None or generation - head.base_generation >= self.compact_after:
            replaced = _keys(session, head)
            # Through a file, not memory: a base is the whole repository (up to the 200 MiB limit).
            with tempfile.TemporaryDirectory(prefix="raas-ws-", dir=self.cache_dir) as tmp:
                bundle = Path(tmp) / "base.bundle"
                git(bare, "bundle", "create", "-q", str(bundle), "--all")
                head.object_key = self._upload(project_id, generation, bundle, "bundle")
            head.base_generation = generation
            session.execute(delete(WorkspaceIncrement).where(WorkspaceIncrement.project_id == project_id))
        else:
            changed = {
                ref: after.get(ref)
                for ref in sorted(before.keys() | after.keys())
                if before.get(ref) != after.get(ref)
            }
            new_tips = sorted({sha for sha in changed.values() if sha is not None})
            increment = WorkspaceIncrement(project_id=project_id, generation=generation, refs=changed)
            with tempfile.TemporaryDirectory(prefix="raas-ws-", dir=self.cache_dir) as tmp:
                pack = Path(tmp) / "added.pack"
                if new_tips and _added_objects(bare, new_tips, sorted(set(before.values())), pack):
                    if pack.stat().st_size > self.inline_max_bytes:
                        increment.object_key = self._upload(project_id, generation, pack, "pack")
                    else:
                        increment.pack = pack.read_bytes()
            session.add(increment)
        head.generation = generation
        head.updated_at = utcnow()
        return replaced

    def _apply(self, bare: Path, plan: Plan) -> None:
        """Bring the cache to the plan's generation.

        Raises:
            ObjectMissing: an object is gone (a compaction replaced it).
        """
        with tempfile.TemporaryDirectory(prefix="raas-ws-", dir=self.cache_dir) as tmp:
            base = Path(tmp) / "base.bundle"
            if plan.base_key is not None:
                self.bucket.get(plan.base_key, base)
            packs: list[bytes | Path] = []
            for step in plan.steps:
                if step.object_key is not None:
                    stored = Path(tmp) / f"{step.generation}.pack"
                    self.bucket.get(step.object_key, stored)
                    packs.append(stored)
                elif step.pack is not None:
                    packs.append(step.pack)
            _set_generation(bare, None)
            if plan.base_key is not None:
                if not (bare / "HEAD").is_file():
                    shutil.rmtree(bare, ignore_errors=True)
                    git(self.cache_dir, "init", "-q", "--bare", "--initial-branch=main", str(bare))
                git(bare, "fetch", "-q", "--prune", "--force", "--no-tags", str(base), "refs/*:refs/*")
            for pack in packs:
                git(bare, "index-pack", "--stdin", input_=pack)
            changes = {ref: sha for step in plan.steps for ref, sha in step.refs.items()}
            if changes:
                lines = [
                    f"update {ref} {sha}\n" if sha else f"delete {ref}\n" for ref, sha in changes.items()
                ]
                git(bare, "update-ref", "--stdin", input_="".join(lines).encode())
        _set_generation(bare, plan.generation)

    def _upload(self, project_id: str, generation: int, data: Path | bytes, kind: str) -> str:
        # A fresh name each time: a writer that crashed after its upload never collides with the
        # next writer of the same generation.
        key = self.bucket.location.key(f"{project_id}/{generation:012d}-{secrets.token_hex(4)}.{kind}")
        self.bucket.put(key, data)
        return key

    def _forget(self, keys: list[str]) -> list[str]:
        """Delete the objects; the keys it could delete."""
        deleted = []
        for key in keys:
            try:
                self.bucket.delete(key)
            except ServiceUnavailable as exc:
                # An orphan costs storage, not correctness: the rows name other objects.
                log.warning("could not delete the replaced workspace object %s: %s", key, exc)
            else:
                deleted.append(key)
        return deleted

    @contextmanager
    def _local_lock(self, project_id: str) -> Iterator[None]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / f"{project_id}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Plan:
    """What brings a cache to ``generation``: the base when it is older than that or unknown,
    then each increment it lacks, oldest first."""

    generation: int
    base_key: str | None
    steps: list[Step]


@dataclass(frozen=True)
class Step:
    """An increment as read from its row (WorkspaceIncrement)."""

    generation: int
    refs: dict[str, str | None]
    pack: bytes | None
    object_key: str | None


def _plan(session: Session, project_id: str, bare: Path, head: WorkspaceHead | None = None) -> Plan | None:
    """What the cache at ``bare`` lacks of the workspace; None when it lacks nothing.

    Raises:
        ObjectMissing: an increment between the base and the head is gone: a compaction
            committed between the two reads (read the head again).
    """
    head = head if head is not None else session.get(WorkspaceHead, project_id)
    held = cached_generation(bare) if (bare / "HEAD").is_file() else 0
    if head is None or head.object_key is None or held == head.generation:
        return None
    from_base = not head.base_generation <= held <= head.generation
    start = head.base_generation if from_base else held
    steps = [
        Step(row.generation, row.refs, row.pack, row.object_key)
        for row in session.scalars(
            select(WorkspaceIncrement)
            .where(
                WorkspaceIncrement.project_id == project_id,
                WorkspaceIncrement.generation > start,
                WorkspaceIncrement.generation <= head.generation,
            )
            .order_by(WorkspaceIncrement.generation)
        )
    ]
    if [step.generation for step in steps] != list(range(start + 1, head.generation + 1)):
        msg = f"workspace {project_id}: increments {start + 1}..{head.generation}"
        raise ObjectMissing(msg)
    return Plan(head.generation, head.object_key if from_base else None, steps)


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


def refs(bare: Path) -> dict[str, str]:
    """Every ref of the repository under ``refs/`` and the object it names; none when there is no
    repository.

    Read from the files git keeps them in (``packed-refs``, then the loose files under ``refs/``,
    which win; gitrepository-layout(5)), not from ``git for-each-ref``: a write reads them twice,
    and two git processes were a tenth of its cost. A repository whose refs are kept otherwise
    (a ``reftable``, a symbolic ref) is asked through git.
    """
    if not (bare / "HEAD").is_file():
        return {}
    if (bare / "reftable").exists():
        return _refs_from_git(bare)
    found: dict[str, str] = {}
    try:
        packed = (bare / "packed-refs").read_text()
    except FileNotFoundError:
        packed = ""
    for line in packed.splitlines():
        if line and line[0] not in "#^":
            sha, name = line.split(" ", 1)
            found[name] = sha
    folders = [bare / "refs"]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir():
                    folders.append(Path(entry.path))
                elif not entry.name.endswith(".lock"):
                    value = Path(entry.path).read_text().strip()
                    if value.startswith("ref:"):
                        return _refs_from_git(bare)
                    found[Path(entry.path).relative_to(bare).as_posix()] = value
    return found


def _refs_from_git(bare: Path) -> dict[str, str]:
    listing = git(bare, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in listing.splitlines())


def _added_objects(bare: Path, new_tips: list[str], old_tips: list[str], pack: Path) -> bool:
    """Write to ``pack`` a pack of the objects ``new_tips`` reach and ``old_tips`` do not; False
    when there are none (the refs moved back, or to objects the previous generation has).

    A pack and not a bundle: one git process where ``bundle create`` runs two, and the refs a
    bundle would carry are in the increment's row. Not thin: it holds every object it needs, so
    any cache at the previous generation takes it. Through a file: an iteration may add as much
    as the workspace's limit.
    """
    revisions = "".join(f"{sha}\n" for sha in new_tips) + "".join(f"^{sha}\n" for sha in old_tips)
    git_to_file(bare, "pack-objects", "--revs", "--stdout", "-q", output=pack, input_=revisions.encode())
    # The header: "PACK", the version, then the number of objects.
    with pack.open("rb") as header:
        return int.from_bytes(header.read(12)[8:12], "big") > 0


def _keys(session: Session, head: WorkspaceHead) -> list[str]:
    """Every object the workspace's rows name."""
    keys = session.scalars(
        select(WorkspaceIncrement.object_key).where(
            WorkspaceIncrement.project_id == head.project_id, WorkspaceIncrement.object_key.is_not(None)
        )
    ).all()
    return [key for key in [head.object_key, *keys] if key is not None]


def _locked_head(session: Session, project_id: str) -> WorkspaceHead:
    """The workspace's head, made if missing, locked until the session ends."""
    values = {
        "project_id": project_id,
        "generation": 0,
        "object_key": None,
        "base_generation": 0,
        "updated_at": utcnow(),
    }
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(WorkspaceHead).values(**values)
    # One round trip: a row that exists is "updated" to itself, which locks it as FOR UPDATE would.
    upsert = insert.on_conflict_do_update(
        index_elements=[WorkspaceHead.project_id], set_={"project_id": insert.excluded.project_id}
    )
    return session.execute(
        upsert.returning(WorkspaceHead), execution_options={"populate_existing": True}
    ).scalar_one()
