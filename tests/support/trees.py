"""Looking at a directory a test unpacked: the links in it, and where they lead."""

from __future__ import annotations

import os
from pathlib import Path


def links_inside(root: Path) -> dict[str, str]:
    """Every link under ``root`` with its target; fails the test if one resolves outside ``root``."""
    found = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            if path.is_symlink():
                # realpath, not resolve(): a link loop is harmless and must not fail the test.
                leads_to = Path(os.path.realpath(path))
                assert leads_to.is_relative_to(os.path.realpath(root)), f"{path} leads outside {root}"
                found[path.relative_to(root).as_posix()] = str(path.readlink())
    return found
