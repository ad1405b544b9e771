"""A project directory as the gzipped tar the CLI uploads and the coordinator unpacks."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

EXCLUDED_DIRS = {".git", "__pycache__", ".venv", "node_modules"}


def pack_directory(root: Path) -> bytes:
    """A gzipped tar of ``root``'s contents, without VCS and cache directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if EXCLUDED_DIRS.intersection(rel.parts):
                continue
            tar.add(path, arcname=rel.as_posix(), recursive=False)
    return buffer.getvalue()
