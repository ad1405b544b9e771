"""Running git, the one way both sides do it.

Workspaces are git repositories (DESIGN.md rule 7); the coordinator owns the bare repository
and a worker moves commits to and from it as bundles over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from shared.errors import GitError

_BASE_CONFIG = (
    "-c",
    "safe.directory=*",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.fsmonitor=false",
)


#: The branch a worker bundles an iteration's commits under.
RESULT_REF = "raas-result"


def _run(
    cwd: Path,
    args: Sequence[str],
    gitdir: Path | None,
    env: dict[str, str] | None,
    input_: bytes | Path | None,
    output: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    where = (f"--git-dir={gitdir}", f"--work-tree={cwd}") if gitdir is not None else ()
    argv = ["git", *_BASE_CONFIG, *where, *args]
    with contextlib.ExitStack() as files:
        stdin = files.enter_context(input_.open("rb")) if isinstance(input_, Path) else None
        stdout = files.enter_context(output.open("wb")) if output is not None else subprocess.PIPE
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            input=input_ if isinstance(input_, bytes) else None,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            check=False,
        )


def git(
    cwd: Path,
    *args: str,
    gitdir: Path | None = None,
    env: dict[str, str] | None = None,
    input_: bytes | Path | None = None,
) -> str:
    """Run ``git args`` in ``cwd`` and return its stdout.

    With ``gitdir``, ``cwd`` is only the work tree: the repository (its config, hooks, objects)
    is ``gitdir``. The worker uses that for workspaces a sandboxed agent could write to — a
    ``.git/config`` planted by the agent (fsmonitor, filters, alternates) must never be read
    by git on the host. Hooks are disabled everywhere; every directory is trusted because the
    work tree belongs to the sandbox's uid.
    """
    proc = _run(cwd, args, gitdir, env, input_)
    _check(args, proc)
    return proc.stdout.decode(errors="replace").strip()


def git_to_file(cwd: Path, *args: str, output: Path, input_: bytes | Path | None = None) -> None:
    """:func:`git` whose stdout goes to the file ``output``: a pack as big as the repository
    stays out of memory."""
    _check(args, _run(cwd, args, None, None, input_, output))


def _check(args: Sequence[str], proc: subprocess.CompletedProcess[bytes]) -> None:
    if proc.returncode != 0:
        msg = f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}"
        raise GitError(msg)


def ignore_by_default(workdir: Path, gitdir: Path, patterns: Sequence[str]) -> None:
    """Keep files matching ``patterns`` out of the next commits, unless ``workdir`` has a
    .gitignore of its own: then that one alone decides.

    The patterns go to ``gitdir/info/exclude``, git's ignore file of one repository, which is
    never committed: the user's repository does not gain a .gitignore it did not have, and a
    worker's ``gitdir`` is outside what the sandbox can write. (``-c core.excludesFile`` would
    need a file all the same and would also drop the host user's own excludes.)
    """
    # lexists: a .gitignore that is a link still counts as the project's own (git will not
    # follow it out of the work tree, and the defaults must not override the project's choice).
    own = os.path.lexists(workdir / ".gitignore")
    exclude = gitdir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("" if own else "".join(f"{pattern}\n" for pattern in patterns), encoding="utf-8")


def commit_all(
    workdir: Path,
    message: str,
    author_name: str,
    author_email: str,
    *,
    allow_empty: bool = False,
    gitdir: Path | None = None,
) -> bool:
    """Commit every change in ``workdir``; False when there was nothing to commit.

    Files git ignores (``.gitignore``, ``info/exclude``; see :func:`ignore_by_default`) are not
    added.
    """
    git(workdir, "add", "-A", gitdir=gitdir)
    ident = f"{author_name} <{author_email}>"
    # Nothing staged is git commit's exit 1 with "nothing to commit" (messages in C): asking
    # `git status` first would be one more process per iteration.
    empty = ["--allow-empty"] if allow_empty else []
    names = ["-c", f"user.name={author_name}", "-c", f"user.email={author_email}"]
    options = ["-q", "--no-verify", *empty, f"--author={ident}", "-m", message]
    proc = _run(workdir, [*names, "commit", *options], gitdir, {**os.environ, "LC_ALL": "C"}, None)
    if proc.returncode == 0:
        return True
    said = (proc.stdout + proc.stderr).decode(errors="replace")
    if proc.returncode == 1 and not allow_empty and "nothing to commit" in said:
        return False
    msg = f"git commit failed: {said.strip()}"
    raise GitError(msg)


def changed_files(workdir: Path, base: str, new: str) -> list[str]:
    out = git(workdir, "diff", "--name-only", base, new)
    return [line for line in out.splitlines() if line]
