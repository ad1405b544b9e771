"""Workspaces in a local directory: one bare repository per project, as a single coordinator or
the embedded mode keeps them. The directory is the truth; nothing else holds a copy."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, project_id: str) -> Path:
        return self.root / f"{project_id}.git"

    def read(self, project_id: str) -> Path:
        return self.path(project_id)

    @contextmanager
    def write(self, project_id: str) -> Iterator[Path]:
        # One host: the compare-and-swap on main (git update-ref) is all the serialising needed.
        self.root.mkdir(parents=True, exist_ok=True)
        yield self.path(project_id)

    def discard(self, project_id: str) -> None:
        shutil.rmtree(self.path(project_id), ignore_errors=True)

    def sweep(self) -> list[str]:
        # A write leaves nothing beside the repository it changed.
        return []
