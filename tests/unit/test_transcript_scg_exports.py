"""The scg package's public names, the ones its users import: splitting the 454-line module into
a package broke no import."""

from __future__ import annotations

import pytest

from orchestrator.transcripts import scg

pytestmark = pytest.mark.unit


def test_the_scg_package_exports_what_its_users_import() -> None:
    assert sorted(scg.__all__) == ["MAGIC", "parse", "sizes", "write"]
    assert all(callable(getattr(scg, name)) for name in ("parse", "sizes", "write"))
    assert scg.MAGIC == "#TRANSCRIPT"
