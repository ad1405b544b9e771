"""What a workspace store promises, whatever keeps the workspaces.

A store hands out a local bare repository for each project: :meth:`WorkspaceStore.read` one at
the workspace's latest state, :meth:`WorkspaceStore.write` one that only its holder changes and
whose changes every reader sees once the block ends without an error. The git operations on that
repository stay in :mod:`orchestrator.scheduling.workspace`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol


class WorkspaceStore(Protocol):
    def read(self, project_id: str) -> Path:
        """The project's bare repository, at least as new as the last finished write.

        The path need not exist: a project without a workspace (yet) reads as a missing directory.
        """
        ...

    def write(self, project_id: str) -> AbstractContextManager[Path]:
        """The project's bare repository to change (or to create, when it does not exist).

        Writes to one workspace are serialised; what the block leaves is published when it ends
        without an error, and nothing of it when it raises.
        """
        ...

    def discard(self, project_id: str) -> None:
        """Forget the project's workspace (a submission that failed after making it)."""
        ...

    def sweep(self) -> list[str]:
        """Delete what the store keeps that no workspace needs any more; what it deleted.

        Run now and then by one replica (the reconcile lease's holder).
        """
        ...
