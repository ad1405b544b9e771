"""Unpacking a workspace archive on a host (shared/archive.py): everything is written except what
could lead outside the directory, which is left out and reported — or, in strict mode (uploads),
refused before anything is written.
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
from pathlib import Path

import pytest

from shared.archive import Reason, UnpackReport, pack_directory, unpack
from shared.errors import UnsafeMember
from tests.support.trees import links_inside

pytestmark = pytest.mark.unit

TOKEN = secrets.token_hex(6)


def _tar(*entries: tuple[str, bytes, str | bytes]) -> bytes:
    """A tar of ``(name, type, data or link target)`` entries, in that order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = str(payload)
            data = payload if kind == tarfile.REGTYPE and isinstance(payload, bytes) else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"x\n") -> tuple[str, bytes, bytes]:
    return name, tarfile.REGTYPE, data


def _dir(name: str) -> tuple[str, bytes, bytes]:
    return name, tarfile.DIRTYPE, b""


def _link(name: str, target: str) -> tuple[str, bytes, str]:
    return name, tarfile.SYMTYPE, target


def _unpack(data: bytes, dest: Path, **options: bool) -> UnpackReport:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return unpack(tar, dest, **options)


def test_links_that_lead_outside_are_left_out_and_everything_else_is_written(tmp_path: Path) -> None:
    # Given what `python3 -m venv` and a hostile agent leave in a workspace
    data = _tar(
        _file("main.py", b"print(1)\n"),
        _dir(".venv/bin"),
        _dir(".venv/lib"),
        _file(".venv/pyvenv.cfg", b"home = /usr/bin\n"),
        _link(".venv/bin/python3", "/usr/bin/python3"),
        _link(".venv/bin/python", "python3"),
        _link(".venv/lib64", "lib"),
        _link("rootlink", "/"),
        _link("up", "../.."),
        _link("sub/d", ".."),
        _link("e", "sub/d/.."),  # each step inside, the whole leads out
        _link("alias.py", "main.py"),
        _link("loop", "loop"),
    )
    dest = tmp_path / "out"

    # When it is unpacked
    report = _unpack(data, dest)

    # Then the links that lead outside are left out and named, every other entry is written
    left = {(entry.name, entry.target, entry.reason) for entry in report.left_out}
    assert left == {
        (".venv/bin/python3", "/usr/bin/python3", Reason.ABSOLUTE_LINK),
        ("rootlink", "/", Reason.ABSOLUTE_LINK),
        ("up", "../..", Reason.LINK_OUTSIDE),
        ("e", "sub/d/..", Reason.LINK_OUTSIDE),
    }
    assert report.files == 2
    assert (dest / "main.py").read_text() == "print(1)\n"
    assert (dest / ".venv/pyvenv.cfg").read_text() == "home = /usr/bin\n"
    assert links_inside(dest) == {
        ".venv/bin/python": "python3",
        ".venv/lib64": "lib",
        "sub/d": "..",
        "alias.py": "main.py",
        "loop": "loop",
    }
    assert str(report.left_out[0]) == "'.venv/bin/python3' -> '/usr/bin/python3'"


@pytest.mark.parametrize("reverse", [False, True], ids=["links-last", "links-first"])
def test_the_archives_order_does_not_change_what_is_written(tmp_path: Path, reverse: bool) -> None:
    # x leads inside only through a (sub/deep/../.. is the top); y leads out through b
    entries = [
        _dir("sub/deep"),
        _link("a", "sub/deep"),
        _link("x", "a/../.."),
        _link("b", ".."),
        _link("y", "b/sub"),
    ]
    data = _tar(*(reversed(entries) if reverse else entries))

    report = _unpack(data, tmp_path / "out")

    assert [(e.name, e.reason) for e in report.left_out] == [("b", Reason.LINK_OUTSIDE)]
    assert links_inside(tmp_path / "out") == {"a": "sub/deep", "x": "a/../..", "y": "b/sub"}


def test_nothing_is_written_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / f"outside-{TOKEN}"
    outside.mkdir()
    data = _tar(
        _dir("sub"),
        _link("inlink", "sub"),
        _file("inlink/planted.txt"),
        _link("outlink", str(outside)),
        _file("outlink/planted.txt"),
        _link("same", str(outside / "same.txt")),
        _file("same", b"a file after a link of the same name\n"),  # the last entry of a name wins
    )
    dest = tmp_path / "out"

    report = _unpack(data, dest)

    assert {(e.name, e.reason) for e in report.left_out} == {
        ("inlink/planted.txt", Reason.BEYOND_LINK),
        ("outlink", Reason.ABSOLUTE_LINK),
        ("outlink/planted.txt", Reason.BEYOND_LINK),
    }
    assert list(outside.iterdir()) == []
    assert list((dest / "sub").iterdir()) == []
    assert not (dest / "same").is_symlink()
    assert (dest / "same").read_text() == "a file after a link of the same name\n"


def test_escaping_names_hard_links_and_special_files_are_left_out(tmp_path: Path) -> None:
    data = _tar(
        _file("kept.txt"),
        _file(f"../escape-{TOKEN}"),
        _file(f"/tmp/raas-absolute-{TOKEN}"),
        ("hard", tarfile.LNKTYPE, "kept.txt"),
        ("pipe", tarfile.FIFOTYPE, b""),
        ("mem", tarfile.CHRTYPE, b""),
    )
    dest = tmp_path / "out"

    report = _unpack(data, dest)

    assert {(e.name, e.reason) for e in report.left_out} == {
        (f"../escape-{TOKEN}", Reason.OUTSIDE),
        (f"/tmp/raas-absolute-{TOKEN}", Reason.OUTSIDE),
        ("hard", Reason.HARD_LINK),
        ("pipe", Reason.SPECIAL),
        ("mem", Reason.SPECIAL),
    }
    assert sorted(p.name for p in dest.iterdir()) == ["kept.txt"]
    assert not (tmp_path / f"escape-{TOKEN}").exists()
    assert not Path(f"/tmp/raas-absolute-{TOKEN}").exists()


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (_link("again.md", "PROMPT.md"), Reason.LINK),
        (_link("passwd", "/etc/passwd"), Reason.LINK),
        (_file("../escape"), Reason.OUTSIDE),
        (("pipe", tarfile.FIFOTYPE, b""), Reason.SPECIAL),
    ],
)
def test_strict_mode_refuses_the_archive_before_writing_anything(
    tmp_path: Path, entry: tuple[str, bytes, str | bytes], reason: Reason
) -> None:
    dest = tmp_path / "out"
    with pytest.raises(UnsafeMember) as refused:
        _unpack(_tar(_file("PROMPT.md"), entry), dest, links=False, strict=True)
    assert refused.value.entry.reason is reason
    assert not dest.exists()


def test_an_unpacked_directory_packs_back_to_the_same_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg/m.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)

    report = _unpack(_tar(), tmp_path / "empty")
    assert (report.files, report.left_out) == (0, ())
    with tarfile.open(fileobj=io.BytesIO(pack_directory(source))) as tar:
        report = unpack(tar, tmp_path / "copy")

    assert (report.files, report.left_out) == (2, ())
    assert (tmp_path / "copy/pkg/m.py").read_text() == "x = 1\n"
    assert os.access(tmp_path / "copy/run.sh", os.X_OK)
