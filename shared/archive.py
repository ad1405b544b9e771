"""A project directory as the gzipped tar the CLI uploads, and the one way a host unpacks one.

Every host-side unpack of a workspace archive (an upload on the coordinator, ``raas pull``, a
checkout of a workspace's files) goes through :func:`unpack`, so one rule holds everywhere:
nothing is ever written through a link, and no link is created that leads outside the
directory. An agent's workspace may hold such links (``python3 -m venv`` makes
``.venv/bin/python3 -> /usr/bin/python3``; a hostile agent ``ln -s / rootlink``): they are left
out and reported, and the rest of the workspace is written. In strict mode (uploads, where the
user can fix the directory) anything that would be left out refuses the whole archive instead,
before anything is written.
"""

from __future__ import annotations

import io
import tarfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath

from shared.errors import UnsafeMember

EXCLUDED_DIRS = {".git", "__pycache__", ".venv", "node_modules"}
# The kernel's own limit on links followed in one lookup (Linux MAXSYMLINKS).
MAX_LINK_HOPS = 40

_Parts = tuple[str, ...]


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


def pack_files(files: Mapping[str, str]) -> bytes:
    """A gzipped tar of text files given as ``{relative path: text}`` (UTF-8), in the upload's form.

    The names are not checked here: the coordinator's strict unpack refuses the whole archive if
    one would land outside the directory.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Reason(str, Enum):
    """Why an archive entry is not written."""

    OUTSIDE = "outside"  # an absolute name, or one with ``..``
    ABSOLUTE_LINK = "absolute_link"
    LINK_OUTSIDE = "link_outside"  # relative, but resolving (through other links) outside
    BEYOND_LINK = "beyond_link"  # its path runs through a link: writing it would follow the link
    HARD_LINK = "hard_link"
    SPECIAL = "special"  # a device, a FIFO
    LINK = "link"  # any symbolic link, where links are not wanted at all (uploads)

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Reason.OUTSIDE: "points outside the directory",
    Reason.ABSOLUTE_LINK: "is a link to an absolute path",
    Reason.LINK_OUTSIDE: "is a link leading outside the directory",
    Reason.BEYOND_LINK: "lies beyond a link",
    Reason.HARD_LINK: "is a hard link",
    Reason.SPECIAL: "is a special file",
    Reason.LINK: "is a link",
}


@dataclass(frozen=True)
class LeftOut:
    """An archive entry that was not written, and why."""

    name: str
    reason: Reason
    target: str | None = None  # where a link points

    def __str__(self) -> str:
        # repr: the names are the agent's, and may hold anything a terminal would act on.
        if self.target is not None:
            return f"{self.name!r} -> {self.target!r}"
        return f"{self.name!r} ({self.reason.description})"


@dataclass(frozen=True)
class UnpackReport:
    files: int  # regular files written
    left_out: tuple[LeftOut, ...]


def unpack(tar: tarfile.TarFile, dest: Path, *, links: bool = True, strict: bool = False) -> UnpackReport:
    """Write the archive's files, directories and safe links into ``dest`` (new or empty).

    Args:
        links: create symbolic links that stay inside ``dest``; False leaves out every link.
        strict: refuse the whole archive, before writing anything, instead of leaving out.

    Raises:
        UnsafeMember: in strict mode, the first entry that would be left out.
        tarfile.TarError, OSError, EOFError: an unreadable archive, or ``dest`` not empty.
    """
    written, left_out = _survey(tar.getmembers(), links=links)
    if strict and left_out:
        first = left_out[0]
        msg = f"{first.name!r} {first.reason.description}"
        raise UnsafeMember(msg, first)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        # The survey assumes nothing is there yet: a link already in dest could be written through.
        msg = f"{dest} is not empty"
        raise FileExistsError(msg)
    refused: set[int] = set()

    def second_line(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        # tarfile's own "data" filter (ownership, modes, escapes) behind the survey.
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError as exc:
            refused.add(id(member))
            reason = _FILTER_REASONS.get(type(exc), Reason.OUTSIDE)
            left_out.append(LeftOut(member.name, reason, member.linkname if member.issym() else None))
            return None

    tar.extractall(dest, members=written, filter=second_line)
    files = sum(1 for m in written if m.isfile() and id(m) not in refused)
    return UnpackReport(files=files, left_out=tuple(left_out))


_FILTER_REASONS: dict[type[Exception], Reason] = {
    tarfile.AbsoluteLinkError: Reason.ABSOLUTE_LINK,
    tarfile.LinkOutsideDestinationError: Reason.LINK_OUTSIDE,
    tarfile.SpecialFileError: Reason.SPECIAL,
}


def _parts(name: str) -> _Parts:
    return tuple(part for part in PurePosixPath(name).parts if part != ".")


def _survey(members: list[tarfile.TarInfo], *, links: bool) -> tuple[list[tarfile.TarInfo], list[LeftOut]]:
    """The members to write and the ones left out, in archive order, decided before writing.

    Deciding on the whole list, not entry by entry as they are extracted, makes the answer
    independent of the archive's order: a link is judged with every other link in place.
    """
    latest: dict[_Parts, tarfile.TarInfo] = {}
    judged: dict[int, Reason] = {}
    for member in members:
        parts = _parts(member.name)
        if member.name.startswith("/") or ".." in parts:
            judged[id(member)] = Reason.OUTSIDE
        elif parts:  # "." is dest itself
            latest[parts] = member  # the last entry of a name is the one a tar means
    every_link = {parts: m.linkname for parts, m in latest.items() if m.issym()}
    for parts, member in latest.items():
        reason = _kind_reason(member, links)
        if reason is None and any(parts[:depth] in every_link for depth in range(1, len(parts))):
            reason = Reason.BEYOND_LINK
        if reason is not None:
            judged[id(member)] = reason
    kept = {parts: target for parts, target in every_link.items() if id(latest[parts]) not in judged}
    for parts, reason in _escaping(kept).items():
        judged[id(latest[parts])] = reason
    final = {id(m) for m in latest.values()}
    written = [m for m in members if id(m) in final and id(m) not in judged and not m.issym()]
    kept = {parts: target for parts, target in kept.items() if id(latest[parts]) not in judged}
    written += [latest[parts] for parts in _creation_order(kept)]
    left_out = [
        LeftOut(m.name, judged[id(m)], m.linkname if m.issym() else None) for m in members if id(m) in judged
    ]
    return written, left_out


def _creation_order(links: dict[_Parts, str]) -> list[_Parts]:
    """The links, each after every link its target runs through.

    tarfile's filter judges a link on disk as it is created: made in this order, it sees the
    tree the survey judged, whatever the archive's order. A link's lookup repeats the lookup of
    each link it runs through, so it runs through strictly more links than any of those.
    """
    return sorted(links, key=lambda link: len(_resolve(links, link, links[link])[1] - {link}))


def _kind_reason(member: tarfile.TarInfo, links: bool) -> Reason | None:
    if member.isfile() or member.isdir():
        return None
    if member.issym():
        return None if links else Reason.LINK
    return Reason.HARD_LINK if member.islnk() else Reason.SPECIAL


def _escaping(kept: dict[_Parts, str]) -> dict[_Parts, Reason]:
    """The links of ``kept`` that lead outside, leaving out the culprits first.

    A link that leads outside only by way of another one that does (``.venv/bin/python ->
    python3``, itself ``-> /usr/bin/python3``) is judged again once that one is left out: it may
    then stay inside. Leaving a link out can also make another lead outside (``x -> a/../..``
    stays inside only while ``a`` is a link two levels down), so judging repeats until none does.
    """
    escaping: dict[_Parts, Reason] = {}
    while True:
        found: dict[_Parts, set[_Parts]] = {}
        for parts, target in kept.items():
            leads_out, through = _resolve(kept, parts, target)
            if leads_out:
                found[parts] = through
        if not found:
            return escaping
        culprits = {link for link, through in found.items() if not (through - {link}) & found.keys()}
        culprits = culprits or set(found)  # each leads out only through another: all of them
        for parts in culprits:
            escaping[parts] = Reason.ABSOLUTE_LINK if kept[parts].startswith("/") else Reason.LINK_OUTSIDE
        kept = {parts: target for parts, target in kept.items() if parts not in culprits}


def _resolve(links: dict[_Parts, str], link: _Parts, target: str) -> tuple[bool, set[_Parts]]:
    """Whether ``link`` (pointing to ``target``) leads outside with ``links`` in place, and the
    other links its lookup follows.

    Like the kernel's lookup, but in the tree the archive describes: a component that is not a
    link is taken as a directory (it may be made one later); ``..`` above the top is outside.
    """
    if target.startswith("/"):
        return True, set()
    where = list(link[:-1])
    pending = deque(_components(target))
    through: set[_Parts] = set()
    hops = 0
    while pending:
        part = pending.popleft()
        if part == "..":
            if not where:
                return True, through
            where.pop()
            continue
        here = (*where, part)
        if here not in links:
            where.append(part)
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            return False, through  # a loop: the kernel gives up (ELOOP) and nothing is reached
        through.add(here)
        followed = links[here]
        if followed.startswith("/"):
            return True, through
        pending.extendleft(reversed(_components(followed)))
    return False, through


def _components(target: str) -> list[str]:
    return [part for part in target.split("/") if part not in ("", ".")]
