"""Workspace round trip through the object store against today's on-disk repository (issue #29).

One round is what the coordinator's API does for an iteration: the worker's fetch
(``GET .../workspace.bundle``: ``workspace.write_bundle(store.read(id))``) and its push
(``POST .../workspace``: ``with store.write(id) as bare: workspace.accept_bundle(bare, ...)``) of a
bundle with a small change. The worker's own clone and commit are made outside the timing (the
same for both stores). Each round runs once on a ``LocalStore`` (a bare repository on disk, the
raw baseline) and once on an ``S3Store`` (moto's S3 server on loopback, the row lock and the
generation in Postgres), alternating, on workspaces of the same files. Goal: p50 <= 1.5x.

A second figure, without a goal, is a fetch through a replica whose cache is behind (another
replica wrote last): the bundle download and the fetch into the cache.

Run: ``.venv/bin/python -m tests.benchmarks.bench_workspace_store [--rounds 60] [--files 200]``.
Needs Postgres (a database of its own, dropped at the end) and moto[server].
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from orchestrator.scheduling import workspace
from orchestrator.workspaces import LocalStore, WorkspaceStore
from orchestrator.workspaces.objects import Bucket, Location
from orchestrator.workspaces.s3 import COMPACT_AFTER, S3Store
from shared.db import session_scope
from shared.git import RESULT_REF, commit_all, git
from shared.models import new_id
from shared.models.workspaces import WorkspaceIncrement
from tests.benchmarks import rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.object_store import moto_server, named_keys


def _seed(root: Path, files: int) -> Path:
    """A project's files: ``files`` source files of about 2 KiB each."""
    seed = root / "seed"
    for n in range(files):
        path = seed / f"pkg{n % 10}" / f"module_{n}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f_{n}_{i}(x):\n    return x + {i}\n" for i in range(60)))
    return seed


def _create(store: WorkspaceStore, seed: Path, tmp: Path) -> str:
    project_id = new_id()
    files = tmp / f"files-{project_id}"
    shutil.copytree(seed, files)
    with store.write(project_id) as bare:
        workspace.create_repo(bare, files)
    return project_id


class Worker:
    """A worker's side of the iterations of one workspace: a clone it commits in and bundles."""

    def __init__(self, store: WorkspaceStore, project_id: str, tmp: Path) -> None:
        self.store, self.project_id, self.tmp = store, project_id, tmp
        self.clone = tmp / f"clone-{project_id}"
        self.fetched = tmp / f"fetched-{project_id}.bundle"
        self.number = 0

    def fetch(self) -> None:
        workspace.write_bundle(self.store.read(self.project_id), self.fetched)

    def commit(self) -> tuple[str, Path]:
        """Clone what was fetched, change one file, commit; the base and the iteration's bundle."""
        self.number += 1
        shutil.rmtree(self.clone, ignore_errors=True)
        git(self.tmp, "clone", "-q", "-b", "main", str(self.fetched), str(self.clone))
        base = git(self.clone, "rev-parse", "HEAD")
        git(self.clone, "checkout", "-q", "-b", RESULT_REF)
        (self.clone / "NOTES.md").write_text(f"iteration {self.number}\n")
        commit_all(self.clone, f"iteration {self.number}", "agent", "agent@constellation.local")
        bundle = self.tmp / f"push-{self.project_id}.bundle"
        git(self.clone, "bundle", "create", "-q", str(bundle), f"{base}..{RESULT_REF}")
        return base, bundle

    def push(self, base: str, bundle: Path) -> str:
        with self.store.write(self.project_id) as bare:
            sha, _ = workspace.accept_bundle(bare, f"it-{self.number}", base, bundle)
        return sha


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _round(worker: Worker) -> tuple[float, str]:
    """One iteration's round trip through the API's calls: ms spent in them, and the new head."""
    fetch_ms = _timed(worker.fetch)
    base, bundle = worker.commit()
    started = time.perf_counter()
    sha = worker.push(base, bundle)
    return fetch_ms + (time.perf_counter() - started) * 1000, sha


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    table = Table()
    with rig.services(), moto_server() as s3, tempfile.TemporaryDirectory(prefix="raas-bench-ws-") as tmp_dir:
        tmp = Path(tmp_dir)
        bucket = Bucket(Location(s3.make_bucket("bench-workspaces"), "ws"), s3.endpoint)
        local = LocalStore(tmp / "local")
        shared, other = S3Store(bucket, tmp / "cache-a"), S3Store(bucket, tmp / "cache-b")
        seed = _seed(tmp, args.files)
        on_disk = Worker(local, _create(local, seed, tmp), tmp)
        in_store = Worker(shared, _create(shared, seed, tmp), tmp)
        for warm in (on_disk, in_store):  # first clone, first connections
            _round(warm)
        local_ms, s3_ms, cold_ms, heads_agree = [], [], [], True
        for n in range(args.rounds):
            local_ms.append(_round(on_disk)[0])
            took, sha = _round(in_store)
            s3_ms.append(took)
            if n % 5 == 0:  # the other replica's cache is behind by some writes
                cold_ms.append(_timed(lambda: other.read(in_store.project_id)))
                heads_agree &= git(other.read(in_store.project_id), "rev-parse", "main") == sha
        named = named_keys(project_id=in_store.project_id)
        with session_scope() as session:
            increments, inline = session.execute(
                select(func.count(), func.count(WorkspaceIncrement.pack)).where(
                    WorkspaceIncrement.project_id == in_store.project_id
                )
            ).one()
        deadline = time.monotonic() + 30  # a compaction's deletes run off the write's path
        while (kept := s3.keys(bucket.location.bucket)) != named and time.monotonic() < deadline:
            time.sleep(0.05)
    print(f"machine: {rig.machine()}")
    print(f"workspace: {args.files} files, {args.rounds} rounds after a warm-up; p50 / p95 in ms")
    table.figures.append(
        Figure(
            "round trip p50 (fetch + push)",
            rig.median(s3_ms),
            rig.median(local_ms),
            "ms",
            "on-disk repository",
            goal_max=1.5,
        )
    )
    table.figures.append(
        Figure(
            "round trip p95 (fetch + push)",
            rig.percentile(s3_ms, 95),
            rig.percentile(local_ms, 95),
            "ms",
            "on-disk repository",
        )
    )
    table.figures.append(
        Figure(
            "fetch through a stale replica, p50",
            rig.median(cold_ms),
            rig.median(local_ms),
            "ms",
            "on-disk round trip",
        )
    )
    table.checks.append(
        Check("the other replica reads the latest main", heads_agree, f"{len(cold_ms)} reads")
    )
    table.checks.append(
        Check(
            "the bucket holds what the rows name",
            kept == named,
            f"{len(kept)} object(s); {increments} increment(s) after the base (at most"
            f" {COMPACT_AFTER - 1}), {inline} of them in the database",
        )
    )
    table.print()


if __name__ == "__main__":
    main()
