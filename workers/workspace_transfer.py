"""How a worker moves a workspace to and from the coordinator: git bundles over HTTP.

A worker host shares no filesystem with the coordinator (DESIGN.md rule 7).
"""

from __future__ import annotations

import logging
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import httpx

from shared.errors import ServiceUnavailable
from shared.git import RESULT_REF, git, ignore_by_default
from shared.schemas import WorkspaceReport

log = logging.getLogger(__name__)

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# A coordinator restart should not cost an iteration its work: keep trying this long.
UNAVAILABLE_FOR_S = 180.0
RETRY_STATUSES = {502, 503, 504}
T = TypeVar("T")


def _retrying(what: str, attempt: Callable[[], T], give_up_after_s: float) -> T:
    """``attempt()`` again, with capped backoff, while the coordinator does not answer."""
    deadline = time.monotonic() + give_up_after_s
    delay = 0.5
    while True:
        try:
            return attempt()
        except (httpx.TransportError, _Unavailable) as exc:
            if time.monotonic() + delay > deadline:
                msg = f"could not {what}: the coordinator did not answer for {give_up_after_s:.0f}s ({exc})"
                raise ServiceUnavailable(msg) from exc
            log.warning("could not %s (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


class _Unavailable(Exception):
    """The coordinator answered 502/503/504: worth another try.

    A local control-flow signal for the retry loop; when tries run out it becomes
    ``ServiceUnavailable``.
    """


def _emptied(dest: Path) -> Path:
    """``dest`` made empty, keeping the directory itself: it may already be bind-mounted into a
    (warm) sandbox, which would not see a directory put in its place."""
    dest.mkdir(parents=True, exist_ok=True)
    for leftover in dest.iterdir():
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()
    return dest


def _reset_keeping_ignored(dest: Path, gitdir: Path, default_ignore: Sequence[str]) -> None:
    """``dest`` made the checkout of ``gitdir``'s HEAD except for the files git ignores: what an
    earlier iteration (or a failed attempt) changed, added or removed is undone, its caches and
    build outputs stay. The agent's own repository goes: the caller copies it anew."""
    agent_git = dest / ".git"
    if agent_git.is_dir() and not agent_git.is_symlink():
        shutil.rmtree(agent_git)
    elif agent_git.is_symlink() or agent_git.exists():
        agent_git.unlink()
    git(dest, "reset", "-q", "--hard", gitdir=gitdir)
    ignore_by_default(dest, gitdir, default_ignore)  # after the reset: the commit's .gitignore decides
    git(dest, "clean", "-q", "-d", "-f", "-f", gitdir=gitdir)


def _bundle_tip(bundle: Path, ref: str) -> str:
    """The commit a bundle names for ``ref``, read from its header (``<sha> <ref>`` lines before
    the first empty one): one git process less per iteration."""
    with bundle.open("rb") as f:
        for raw in f:
            line = raw.decode(errors="replace").rstrip("\n")
            if not line:
                break
            sha, _, name = line.partition(" ")
            if name == ref and not sha.startswith("-"):
                return sha
    msg = f"the workspace bundle names no {ref}"
    raise ServiceUnavailable(msg)


def _agent_repository(gitdir: Path, dest: Path) -> None:
    """Give the agent a repository of its own in ``dest/.git``: a copy of the host's, on ``main``,
    without a remote. The host never reads it again (the agent can write it); copying files
    costs a fraction of the clone it replaces."""
    agent_git = dest / ".git"
    shutil.copytree(gitdir, agent_git, symlinks=True)
    (agent_git / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    )
    (agent_git / "HEAD").write_text("ref: refs/heads/main\n")
    (agent_git / "refs" / "heads" / RESULT_REF).unlink(missing_ok=True)


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """One TLS context for every client of the process: making one (loading the CA bundle)
    takes ~0.05 s of CPU, which a worker running many iterations at once would pay per iteration."""
    return httpx.create_ssl_context()


class WorkspaceTransfer:
    def __init__(self, base_url: str, token: str, unavailable_for_s: float = UNAVAILABLE_FOR_S) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT, verify=_tls()
        )
        self._patience_s = unavailable_for_s

    def close(self) -> None:
        self._http.close()

    def fetch_workspace(
        self, project_id: str, dest: Path, gitdir: Path, keep_ignored: Sequence[str] | None = None
    ) -> str:
        """Check the project's workspace out into ``dest``; return the commit it starts from.

        ``keep_ignored`` (the project's default ignores): ``dest`` is a reused task container's
        workspace and keeps what git ignores there (caches, build outputs); every other file is
        the commit's, as in a fresh checkout. None: ``dest`` is emptied first.

        The worker's own repository is ``gitdir``, outside what the sandbox can write. ``dest``
        gets a repository of its own (``.git``, a copy), for the agent's use; the host never
        reads that one. Two git processes in all: every one costs a few milliseconds of CPU, and a
        threads worker runs a hundred iterations at once.
        """
        with tempfile.TemporaryDirectory(prefix="raas-fetch-") as tmp:
            bundle = Path(tmp) / "workspace.bundle"

            def download() -> None:
                with self._http.stream("GET", f"/v1/projects/{project_id}/workspace.bundle") as resp:
                    if resp.status_code in RETRY_STATUSES:
                        raise _Unavailable(resp.status_code)
                    if resp.status_code != 200:
                        resp.read()
                        msg = f"coordinator refused the workspace of {project_id}: {resp.text}"
                        raise ServiceUnavailable(msg)
                    with bundle.open("wb") as out:
                        for chunk in resp.iter_bytes():
                            out.write(chunk)

            _retrying(f"fetch the workspace of {project_id}", download, self._patience_s)
            if gitdir.exists():
                shutil.rmtree(gitdir)
            # --template=: no sample hooks and descriptions, files every iteration would write
            # and remove again for nothing (hooks are off anyway).
            git(
                gitdir.parent,
                "clone",
                "-q",
                "--template=",
                "--bare",
                "--branch",
                "main",
                str(bundle),
                str(gitdir),
            )
            base_sha = _bundle_tip(bundle, "refs/heads/main")
        # The host commits the iteration's work on a branch of its own, the one it bundles back.
        heads = gitdir / "refs" / "heads"
        heads.mkdir(parents=True, exist_ok=True)
        (heads / RESULT_REF).write_text(base_sha + "\n")
        (gitdir / "HEAD").write_text(f"ref: refs/heads/{RESULT_REF}\n")
        # The files and the host's index in one process; then the agent's own repository.
        if keep_ignored is None:
            git(_emptied(dest), "reset", "-q", "--hard", gitdir=gitdir)
        else:
            _reset_keeping_ignored(dest, gitdir, keep_ignored)
        _agent_repository(gitdir, dest)
        return base_sha

    def push_workspace(
        self, project_id: str, iteration_id: str, attempt: int, gitdir: Path, base_sha: str
    ) -> WorkspaceReport:
        """Send the commits made since ``base_sha``; the coordinator moves ``main`` to them."""
        new_sha = git(gitdir, "rev-parse", "HEAD")
        if new_sha == base_sha:
            return WorkspaceReport(sha=base_sha, files_changed=[])
        with tempfile.TemporaryDirectory(prefix="raas-push-") as tmp:
            bundle = Path(tmp) / "iteration.bundle"
            # HEAD is RESULT_REF since the fetch: the host's repository, never the agent's.
            git(gitdir, "bundle", "create", "-q", str(bundle), f"{base_sha}..{RESULT_REF}")
            body = bundle.read_bytes()

            def upload() -> httpx.Response:
                response = self._http.post(
                    f"/v1/projects/{project_id}/iterations/{iteration_id}/workspace",
                    params={"base": base_sha, "attempt": attempt},
                    content=body,
                )
                if response.status_code in RETRY_STATUSES:
                    raise _Unavailable(response.status_code)
                return response

            # Idempotent on the coordinator's side: a push applied whose answer was lost is
            # accepted again.
            resp = _retrying(f"send the workspace of iteration {iteration_id}", upload, self._patience_s)
        if resp.status_code != 200:
            msg = f"coordinator refused the workspace of iteration {iteration_id}: {resp.text}"
            raise ServiceUnavailable(msg)
        return WorkspaceReport.model_validate(resp.json())
