"""Where the coordinators keep the projects' workspaces: the store every read and write of a
workspace goes through.

- :class:`LocalStore` (``local``): bare repositories in RAAS_DATA_DIR/workspaces, the truth on
  one host's disk: the default, and always the embedded mode's.
- :class:`S3Store` (``s3``): RAAS_WORKSPACE_STORE=s3://bucket/prefix. The truth is a base bundle
  per workspace in an object store (``objects``), the increments written since and a generation
  per workspace in the database (``shared.models.workspaces``); each replica's disk is a cache it
  can lose.

Get the process's store with :func:`get_store`; a coordinator calls :func:`check_store` before it
starts serving. ``migrate`` uploads the workspaces a local directory holds (``raas
migrate-workspaces``). Imports nothing else of the coordinator: every layer above uses it.
"""

from __future__ import annotations

import threading

from orchestrator.workspaces.base import WorkspaceStore
from orchestrator.workspaces.local import LocalStore
from shared.settings import Settings

# The S3 store (orchestrator.workspaces.s3, .objects) is imported where one is made: boto3 takes
# a third of a second to import, on every `raas` command and every process that never uses it.
__all__ = ["LocalStore", "WorkspaceStore", "check_store", "get_store"]

_stores: dict[tuple[str | None, str | None, str, str], WorkspaceStore] = {}
_making = threading.Lock()


def get_store(settings: Settings) -> WorkspaceStore:
    """The store ``settings`` configure, one per configuration per process (it keeps a client
    and a cache)."""
    cache = settings.workspace_cache_dir() if settings.workspace_store else settings.workspaces_dir()
    key = (settings.workspace_store, settings.s3_endpoint_url, str(cache), settings.database_url)
    with _making:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = _make(settings)
        return store


def _make(settings: Settings) -> WorkspaceStore:
    if not settings.workspace_store:
        return LocalStore(settings.workspaces_dir())
    from orchestrator.workspaces.objects import Bucket
    from orchestrator.workspaces.s3 import S3Store

    return S3Store(Bucket.from_settings(settings), settings.workspace_cache_dir(), settings.database_url)


def check_store(settings: Settings) -> None:
    """Refuse to start, in one line naming the endpoint and what to do, when the configured
    object store does not answer or has no such bucket (nothing to check for a local store).

    Raises:
        ServiceUnavailable: the endpoint does not answer.
        InvalidInput: the bucket is missing, access is refused, or the URL is not s3://bucket/prefix.
    """
    if settings.workspace_store:
        from orchestrator.workspaces.objects import Bucket

        Bucket.from_settings(settings, timeout_s=5.0).check()
