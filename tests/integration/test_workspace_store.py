"""The workspace store in an object store (issue #29, point 1): any replica reads what another
wrote, a replica's disk is only a cache, writers of one workspace take turns, and a coordinator
refuses to start against a store it cannot reach.

Real moto S3 server on loopback, real Postgres, real git; each "replica" is an S3Store with a
cache directory of its own, as each coordinator process has.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.scheduling import workspace
from orchestrator.workspaces import LocalStore, check_store
from orchestrator.workspaces import s3 as s3_store
from orchestrator.workspaces.objects import Bucket, Location
from orchestrator.workspaces.s3 import S3Store, refs
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput, ServiceUnavailable
from shared.git import RESULT_REF, commit_all, git
from shared.models import new_id
from shared.models.workspaces import WorkspaceHead, WorkspaceIncrement
from shared.settings import Settings
from tests.support.loopback import free_port
from tests.support.object_store import ObjectStoreServer, moto_server, named_keys

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3() -> Iterator[ObjectStoreServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def bucket(s3: ObjectStoreServer, database_url: str) -> Bucket:
    name = s3.make_bucket(f"ws-{secrets.token_hex(4)}")
    return Bucket(Location(name, "workspaces"), s3.endpoint)


def replica(bucket: Bucket, tmp_path: Path, name: str) -> S3Store:
    return S3Store(bucket, tmp_path / f"cache-{name}")


def create(store: S3Store, tmp_path: Path, files: dict[str, str]) -> str:
    project_id = new_id()
    root = tmp_path / f"upload-{project_id}"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    with store.write(project_id) as bare:
        workspace.create_repo(bare, root)
    return project_id


def iteration_bundle(store: S3Store, project_id: str, tmp_path: Path, name: str) -> tuple[str, Path]:
    """What a worker does: fetch main as a bundle, commit a file, bundle the commit back."""
    fetched = tmp_path / f"{name}-main.bundle"
    workspace.write_bundle(store.read(project_id), fetched)
    work = tmp_path / f"work-{name}"
    git(tmp_path, "clone", "-q", "-b", "main", str(fetched), str(work))
    base = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "-b", RESULT_REF)
    (work / f"{name}.txt").write_text(f"written by {name}\n")
    commit_all(work, f"add {name}", "agent", "agent@constellation.local")
    bundle = tmp_path / f"{name}.bundle"
    git(work, "bundle", "create", "-q", str(bundle), f"{base}..{RESULT_REF}")
    return base, bundle


def push(store: S3Store, project_id: str, base: str, bundle: Path, iteration: str) -> str:
    with store.write(project_id) as bare:
        sha, _ = workspace.accept_bundle(bare, iteration, base, bundle)
    return sha


def files_of(store: S3Store, project_id: str) -> list[str]:
    return git(store.read(project_id), "ls-tree", "-r", "--name-only", "main").splitlines()


def generation(project_id: str) -> int:
    with session_scope() as session:
        head = session.get(WorkspaceHead, project_id)
        return head.generation if head else 0


def test_a_workspace_written_through_one_replica_is_read_back_through_the_other(
    bucket: Bucket, tmp_path: Path
) -> None:
    one, other = replica(bucket, tmp_path, "one"), replica(bucket, tmp_path, "other")
    # Given a workspace created and advanced by one iteration through the first replica
    project_id = create(one, tmp_path, {"PLAN.md": "plan\n"})
    base, bundle = iteration_bundle(one, project_id, tmp_path, "first")
    sha = push(one, project_id, base, bundle, "it-1")
    # Then the other replica, which never saw it, reads the same main, files and refs
    assert git(other.read(project_id), "rev-parse", "main") == sha
    assert files_of(other, project_id) == ["PLAN.md", "first.txt"]
    assert git(other.read(project_id), "rev-parse", "refs/raas/iterations/it-1") == sha
    # And an iteration fetched through the other replica pushes back through it on top of that
    base2, bundle2 = iteration_bundle(other, project_id, tmp_path, "second")
    assert base2 == sha
    sha2 = push(other, project_id, base2, bundle2, "it-2")
    assert git(one.read(project_id), "rev-parse", "main") == sha2
    assert files_of(one, project_id) == ["PLAN.md", "first.txt", "second.txt"]


def test_a_replicas_local_disk_wiped_between_iterations_loses_nothing(bucket: Bucket, tmp_path: Path) -> None:
    store = replica(bucket, tmp_path, "one")
    project_id = create(store, tmp_path, {"PLAN.md": "plan\n"})
    base, bundle = iteration_bundle(store, project_id, tmp_path, "first")
    first = push(store, project_id, base, bundle, "it-1")
    # When the replica's whole cache directory is lost between two iterations
    shutil.rmtree(store.cache_dir)
    base2, bundle2 = iteration_bundle(store, project_id, tmp_path, "second")
    assert base2 == first
    second = push(store, project_id, base2, bundle2, "it-2")
    shutil.rmtree(store.cache_dir)
    # Then both iterations' commits are there, read through the same replica and a fresh one
    for reader in (store, replica(bucket, tmp_path, "fresh")):
        bare = reader.read(project_id)
        assert git(bare, "rev-list", "--count", "main") == "3"
        assert git(bare, "rev-parse", "main") == second
        assert files_of(reader, project_id) == ["PLAN.md", "first.txt", "second.txt"]


def test_a_write_that_fails_publishes_nothing(s3: ObjectStoreServer, bucket: Bucket, tmp_path: Path) -> None:
    store = replica(bucket, tmp_path, "one")
    project_id = create(store, tmp_path, {"PLAN.md": "plan\n"})
    base, bundle = iteration_bundle(store, project_id, tmp_path, "first")
    push(store, project_id, base, bundle, "it-1")
    assert generation(project_id) == 2

    # When a writer changes its cache and then fails before publishing
    def crash_mid_write() -> None:
        with store.write(project_id) as bare:
            git(bare, "update-ref", "refs/raas/half-done", git(bare, "rev-parse", "main"))
            msg = "crashed mid-write"
            raise RuntimeError(msg)

    with pytest.raises(RuntimeError):
        crash_mid_write()
    # Then the store is as before: same generation, and the cache forgets the half-done ref
    assert generation(project_id) == 2
    refs = git(store.read(project_id), "for-each-ref", "--format=%(refname)")
    assert "refs/raas/half-done" not in refs.splitlines()
    # And the bucket holds what the rows name and nothing else: the failed write stored nothing
    assert s3.keys(bucket.location.bucket) == named_keys(project_id=project_id)


def rows_of(project_id: str) -> tuple[WorkspaceHead, list[WorkspaceIncrement]]:
    with session_scope() as session:
        head = session.get(WorkspaceHead, project_id)
        assert head is not None
        steps = session.scalars(
            select(WorkspaceIncrement)
            .where(WorkspaceIncrement.project_id == project_id)
            .order_by(WorkspaceIncrement.generation)
        ).all()
        return head, list(steps)


def object_size(s3: ObjectStoreServer, bucket: Bucket, key: str) -> int:
    return int(s3.client().head_object(Bucket=bucket.location.bucket, Key=key)["ContentLength"])


@pytest.mark.parametrize("inline_max_bytes", [256 * 1024, 0], ids=["in-the-database", "in-the-bucket"])
def test_a_write_stores_what_it_added_and_a_compaction_deletes_what_it_replaced(
    s3: ObjectStoreServer, bucket: Bucket, tmp_path: Path, inline_max_bytes: int
) -> None:
    store = S3Store(bucket, tmp_path / "cache-one", compact_after=3, inline_max_bytes=inline_max_bytes)
    big = {f"module_{n}.py": secrets.token_hex(2000) for n in range(20)}  # not compressible
    project_id = create(store, tmp_path, {"PLAN.md": "plan\n", **big})
    # When two iterations are pushed after the workspace was made
    for n in (1, 2):
        base, bundle = iteration_bundle(store, project_id, tmp_path, f"it{n}")
        push(store, project_id, base, bundle, f"it-{n}")
    # Then the head names the base and there is one increment per write, each far smaller than
    # the base (the write's objects, not the repository again), in its row or in the bucket
    head, steps = rows_of(project_id)
    assert (head.generation, head.base_generation, [step.generation for step in steps]) == (3, 1, [2, 3])
    assert all(step.refs["refs/heads/main"] for step in steps)
    base_size = object_size(s3, bucket, str(head.object_key))
    if inline_max_bytes:
        sizes = [len(step.pack or b"") for step in steps]
        assert all(step.object_key is None for step in steps)
    else:
        sizes = [object_size(s3, bucket, str(step.object_key)) for step in steps]
        assert all(step.pack is None for step in steps)
    assert all(0 < size * 5 < base_size for size in sizes)
    assert s3.keys(bucket.location.bucket) == named_keys(project_id=project_id)
    # And a replica that never saw the workspace reads it from the base and the increments
    assert git(replica(bucket, tmp_path, "fresh").read(project_id), "rev-parse", "main") == git(
        store.read(project_id), "rev-parse", "main"
    )
    # When the third write after the base comes (compact_after=3)
    base, bundle = iteration_bundle(store, project_id, tmp_path, "it3")
    sha = push(store, project_id, base, bundle, "it-3")
    # Then it is a new base with no increment, and the objects it replaced are deleted (off the
    # write's path)
    head, steps = rows_of(project_id)
    assert (head.generation, head.base_generation, steps) == (4, 4, [])
    deadline = time.monotonic() + 30
    while (
        s3.keys(bucket.location.bucket) != named_keys(project_id=project_id) and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert s3.keys(bucket.location.bucket) == [head.object_key]
    # And a replica that never saw the workspace reads every iteration from the base alone
    fresh = replica(bucket, tmp_path, "fresh2")
    assert git(fresh.read(project_id), "rev-parse", "main") == sha
    assert files_of(fresh, project_id) == sorted(["PLAN.md", *big, "it1.txt", "it2.txt", "it3.txt"])


def test_a_replica_writes_behind_takes_the_increments_with_their_ref_moves_and_deletions(
    bucket: Bucket, tmp_path: Path
) -> None:
    one, other = replica(bucket, tmp_path, "one"), replica(bucket, tmp_path, "other")
    project_id = create(one, tmp_path, {"PLAN.md": "plan\n"})
    first_main = git(other.read(project_id), "rev-parse", "main")
    # Given writes the other replica does not see: an iteration (new objects), an annotated tag,
    # then a write that adds no object (main moved back to a commit it has, a ref deleted, one added)
    base, bundle = iteration_bundle(one, project_id, tmp_path, "first")
    pushed = push(one, project_id, base, bundle, "it-1")
    with one.write(project_id) as bare:  # a tag object is an object too
        git(
            bare,
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@constellation.local",
            "tag",
            "-a",
            "-m",
            "v1",
            "v1",
            pushed,
        )
    with one.write(project_id) as bare:
        git(bare, "update-ref", "refs/heads/main", first_main)
        git(bare, "update-ref", "-d", "refs/raas/iterations/it-1")
        git(bare, "update-ref", "refs/raas/kept", pushed)
    head, steps = rows_of(project_id)
    assert (steps[-1].pack, steps[-1].object_key) == (None, None)
    assert steps[-1].refs == {
        "refs/heads/main": first_main,
        "refs/raas/iterations/it-1": None,
        "refs/raas/kept": pushed,
    }
    # Then the other replica, three writes behind, ends with exactly the writer's refs and objects
    listing = ["for-each-ref", "--format=%(refname) %(objectname)"]
    assert git(other.read(project_id), *listing) == git(one.read(project_id), *listing)
    assert git(other.read(project_id), "cat-file", "-t", pushed) == "commit"
    assert git(other.read(project_id), "cat-file", "-t", "refs/tags/v1") == "tag"
    # And a write that changes nothing publishes no generation
    with one.write(project_id):
        pass
    assert generation(project_id) == head.generation


def test_a_cache_ahead_of_the_head_is_rebuilt_not_trusted(bucket: Bucket, tmp_path: Path) -> None:
    # The database restored from a backup taken one write ago: the head is a generation behind
    # what a replica's cache holds, and that cache's main is a commit the store no longer has.
    one, other = replica(bucket, tmp_path, "one"), replica(bucket, tmp_path, "other")
    project_id = create(one, tmp_path, {"PLAN.md": "plan\n"})
    first_main = git(other.read(project_id), "rev-parse", "main")
    base, bundle = iteration_bundle(one, project_id, tmp_path, "lost")
    push(one, project_id, base, bundle, "it-lost")
    assert git(other.read(project_id), "rev-parse", "main") != first_main
    with session_scope() as session:
        head = session.get_one(WorkspaceHead, project_id)
        session.delete(session.get_one(WorkspaceIncrement, (project_id, head.generation)))
        head.generation -= 1
    # Then both replicas read main as the restored head has it
    assert git(other.read(project_id), "rev-parse", "main") == first_main
    assert git(one.read(project_id), "rev-parse", "main") == first_main


def test_two_writers_of_one_workspace_take_turns_and_main_moves_only_from_its_base(
    bucket: Bucket, tmp_path: Path
) -> None:
    one, other = replica(bucket, tmp_path, "one"), replica(bucket, tmp_path, "other")
    project_id = create(one, tmp_path, {"PLAN.md": "plan\n"})
    # Given two iterations that started from the same commit, one on each replica
    base_a, bundle_a = iteration_bundle(one, project_id, tmp_path, "a")
    base_b, bundle_b = iteration_bundle(other, project_id, tmp_path, "b")
    assert base_a == base_b
    # When the first replica holds the workspace's write while the other tries to write
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def first() -> None:
        with one.write(project_id) as bare:
            order.append("one")
            workspace.accept_bundle(bare, "it-a", base_a, bundle_a)
            holding.set()
            release.wait(30)

    outcome: list[BaseException | str] = []

    def second() -> None:
        try:
            outcome.append(push(other, project_id, base_b, bundle_b, "it-b"))
        except Conflict as exc:
            outcome.append(exc)
        order.append("other")

    writer = threading.Thread(target=first)
    writer.start()
    assert holding.wait(30)
    racer = threading.Thread(target=second)
    racer.start()
    racer.join(1.0)
    # Then the other waits for the lock rather than writing alongside
    assert racer.is_alive()
    assert order == ["one"]
    release.set()
    writer.join(30)
    racer.join(30)
    # And finds main moved: the compare-and-swap refuses it, and only the first iteration is kept
    assert order == ["one", "other"]
    assert len(outcome) == 1
    assert isinstance(outcome[0], Conflict)
    assert files_of(replica(bucket, tmp_path, "third"), project_id) == ["PLAN.md", "a.txt"]
    assert generation(project_id) == 2


def test_a_store_that_does_not_answer_or_has_no_bucket_is_refused_in_one_line(s3: ObjectStoreServer) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    unreachable = Settings(workspace_store="s3://raas-ws/prefix", s3_endpoint_url=closed)
    with pytest.raises(ServiceUnavailable, match=f"s3://raas-ws at {closed} does not answer") as down:
        check_store(unreachable)
    assert "\n" not in str(down.value)
    missing = Settings(workspace_store="s3://no-such-bucket/prefix", s3_endpoint_url=s3.endpoint)
    with pytest.raises(InvalidInput, match="bucket s3://no-such-bucket at .* does not exist") as absent:
        check_store(missing)
    assert "\n" not in str(absent.value)
    check_store(Settings(workspace_store=None))  # a local directory: nothing to check


def _raas(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_migrate_workspaces_uploads_each_on_disk_workspace_once(
    s3: ObjectStoreServer, bucket: Bucket, tmp_path: Path
) -> None:
    # Given a coordinator's on-disk workspace, as today's single coordinator keeps them
    data_dir = tmp_path / "data"
    local = LocalStore(data_dir / "workspaces")
    project_id = new_id()
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "PLAN.md").write_text("plan\n")
    with local.write(project_id) as bare:
        sha = workspace.create_repo(bare, tmp_path / "files")
    env = {**s3.env(bucket.location.bucket), "RAAS_DATA_DIR": str(data_dir)}
    # When it is migrated, twice
    first = _raas(["migrate-workspaces"], env)
    again = _raas(["migrate-workspaces"], env)
    # Then the first run uploads it and the second finds it there
    assert first.returncode == 0, first.stderr
    assert "1 workspaces uploaded, 0 already in the store" in first.stdout
    assert again.returncode == 0, again.stderr
    assert "0 workspaces uploaded, 1 already in the store" in again.stdout
    # And any replica reads it from the store
    assert git(replica(bucket, tmp_path, "any").read(project_id), "rev-parse", "main") == sha


def test_migrate_workspaces_without_a_store_or_with_an_unreachable_one_says_so_in_one_line(
    tmp_path: Path, database_url: str
) -> None:
    unset = _raas(["migrate-workspaces"], {"RAAS_DATA_DIR": str(tmp_path), "RAAS_WORKSPACE_STORE": ""})
    assert unset.returncode != 0
    assert unset.stderr.strip().splitlines() == [
        "error: no object store to migrate to: set RAAS_WORKSPACE_STORE=s3://bucket/prefix"
    ]
    closed = f"http://127.0.0.1:{free_port()}"
    down = _raas(
        ["migrate-workspaces"],
        {
            "RAAS_DATA_DIR": str(tmp_path),
            "RAAS_WORKSPACE_STORE": "s3://raas-ws",
            "RAAS_S3_ENDPOINT_URL": closed,
        },
    )
    assert down.returncode != 0
    lines = down.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: workspace store: s3://raas-ws at {closed} does not answer")


def test_a_coordinator_refuses_to_start_against_a_store_that_does_not_answer_or_lacks_its_bucket(
    s3: ObjectStoreServer, tmp_path: Path, database_url: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    start = ["coordinator", "--port", str(free_port())]
    base = {"RAAS_DATA_DIR": str(tmp_path)}
    down = _raas(start, {**base, "RAAS_WORKSPACE_STORE": "s3://raas-ws/p", "RAAS_S3_ENDPOINT_URL": closed})
    assert down.returncode != 0
    assert len(down.stderr.strip().splitlines()) == 1
    assert down.stderr.startswith(f"error: workspace store: s3://raas-ws at {closed} does not answer")
    absent = _raas(start, {**base, **s3.env("no-such-bucket")})
    assert absent.returncode != 0
    assert absent.stderr.strip().splitlines() == [
        f"error: workspace store: bucket s3://no-such-bucket at {s3.endpoint} does not exist; "
        "create it or fix RAAS_WORKSPACE_STORE"
    ]


def test_the_refs_read_from_gits_files_are_the_ones_git_lists(tmp_path: Path) -> None:
    bare = tmp_path / "ws.git"
    assert refs(bare) == {}
    root = tmp_path / "files"
    root.mkdir()
    (root / "PLAN.md").write_text("plan\n")
    workspace.create_repo(bare, root)
    main = git(bare, "rev-parse", "main")
    # Given refs packed, loose over packed, loose alone, nested, and a packed one deleted
    for name in ("refs/raas/iterations/a", "refs/raas/iterations/b", "refs/tags/v1"):
        git(bare, "update-ref", name, main)
    identity = ("-c", "user.name=t", "-c", "user.email=t@constellation.local")
    git(bare, *identity, "tag", "-a", "-m", "annotated", "v2", main)
    git(bare, "pack-refs", "--all")
    git(bare, "update-ref", "-d", "refs/raas/iterations/b")
    git(bare, "update-ref", "refs/raas/iterations/a", git(bare, "rev-parse", "v2"))
    git(bare, "update-ref", "refs/raas/deep/er/c", main)
    listing = git(bare, "for-each-ref", "--format=%(refname) %(objectname)")
    # Then reading git's files gives what git itself lists
    assert refs(bare) == dict(line.split(" ", 1) for line in listing.splitlines())
    assert "refs/raas/iterations/b" not in refs(bare)


def test_the_sweep_deletes_only_objects_no_row_names_and_leaves_a_workspace_being_written(
    s3: ObjectStoreServer, bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3Store(bucket, tmp_path / "cache-one", inline_max_bytes=0)
    project_id = create(store, tmp_path, {"PLAN.md": "plan\n"})
    base, bundle = iteration_bundle(store, project_id, tmp_path, "first")
    push(store, project_id, base, bundle, "it-1")
    named = named_keys(project_id=project_id)
    assert len(named) == 2  # the base and the iteration's pack

    def put(key: str) -> str:
        s3.client().put_object(Bucket=bucket.location.bucket, Key=key, Body=b"PACK")
        return key

    # Given the upload of a write that crashed before its commit, a file under the prefix that
    # is not the store's, and a fresh object of a workspace whose first write has not committed
    crashed = put(f"workspaces/{project_id}/000000000003-0badf00d.pack")
    foreign = put(f"workspaces/{project_id}/README.txt")
    first_write = put("workspaces/not-yet-committed/000000000001-0123abcd.bundle")
    # When the store is swept
    swept = store.sweep()
    # Then only the crashed write's upload goes
    assert swept == [crashed]
    assert sorted(s3.keys(bucket.location.bucket)) == sorted([*named, foreign, first_write])
    # And a workspace being written is left alone until its write ends
    writing, release = threading.Event(), threading.Event()
    orphan = put(f"workspaces/{project_id}/000000000004-feedf00d.pack")

    def hold() -> None:
        with store.write(project_id):
            writing.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert writing.wait(30)
    try:
        assert store.sweep() == []
    finally:
        release.set()
        holder.join(30)
    assert store.sweep() == [orphan]
    # And an object of a workspace with no head goes once it is older than a first write can be
    monkeypatch.setattr(s3_store, "ORPHAN_AGE_S", 0.0)
    time.sleep(1.1)  # the bucket's clock counts whole seconds
    assert store.sweep() == [first_write]
    assert sorted(s3.keys(bucket.location.bucket)) == sorted([*named, foreign])
    assert git(store.read(project_id), "rev-parse", "main") == git(
        replica(bucket, tmp_path, "fresh").read(project_id), "rev-parse", "main"
    )
