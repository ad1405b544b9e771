"""Moving the workspaces a local directory holds (a single coordinator's RAAS_DATA_DIR/workspaces)
into the object store, for ``raas migrate-workspaces``.

Idempotent: a workspace the store already holds is left as it is (the store's is the newer once
replicas write to it), so the command can run again after an interruption, or on every host that
ever held workspaces.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from orchestrator.workspaces.objects import Bucket
from orchestrator.workspaces.s3 import S3Store
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.git import git
from shared.models.workspaces import WorkspaceHead
from shared.settings import Settings


@dataclass(frozen=True)
class Migrated:
    uploaded: list[str]
    already: list[str]


def migrate_workspaces(settings: Settings, source: Path | None = None) -> Migrated:
    """Upload every bare repository under ``source`` (default: RAAS_DATA_DIR/workspaces) that the
    configured store does not hold yet.

    Raises:
        InvalidInput: no object store is configured (RAAS_WORKSPACE_STORE), or it refuses.
        ServiceUnavailable: the object store does not answer.
    """
    if not settings.workspace_store:
        msg = "no object store to migrate to: set RAAS_WORKSPACE_STORE=s3://bucket/prefix"
        raise InvalidInput(msg)
    bucket = Bucket.from_settings(settings)
    bucket.check()
    store = S3Store(bucket, settings.workspace_cache_dir(), settings.database_url)
    root = source or settings.workspaces_dir()
    repos = sorted(p for p in root.glob("*.git") if (p / "HEAD").is_file()) if root.is_dir() else []
    with session_scope(settings.database_url) as session:
        held = set(session.scalars(select(WorkspaceHead.project_id).where(WorkspaceHead.generation > 0)))
    uploaded, already = [], []
    for repo in repos:
        project_id = repo.name.removesuffix(".git")
        if project_id in held:
            already.append(project_id)
            continue
        with store.write(project_id) as bare:
            if (bare / "HEAD").is_file():  # another host migrated it meanwhile: the store's stays
                already.append(project_id)
                continue
            _copy(repo, bare)
        uploaded.append(project_id)
    return Migrated(uploaded, already)


def _copy(repo: Path, bare: Path) -> None:
    shutil.rmtree(bare, ignore_errors=True)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(bare.parent, "init", "-q", "--bare", "--initial-branch=main", str(bare))
    git(bare, "fetch", "-q", "--no-tags", str(repo.resolve()), "refs/*:refs/*")
