"""Sandbox operations for images without python3: one ``docker exec`` of a shell script each.

Slower (~70 ms an operation) but equivalent: paths are confined with ``realpath`` inside the
container, commands run under ``timeout -s KILL`` with their output capped in the container
(the first ``limit`` bytes are kept), and glob listings are matched on the host with the
helper's own glob regex, so both paths answer alike.
"""

from __future__ import annotations

import errno
import os
import shlex
import time
from typing import Any

from docker import APIClient

from shared.errors import PathOutsideWorkspace, SandboxError
from workers.sandbox import helper
from workers.sandbox.channel import ExecStream

# Exit codes of _CONFINE and the op scripts, mapped back to exceptions on the host.
_OUTSIDE, _MISSING, _IS_DIR, _TOO_BIG = 90, 91, 92, 93
_MARK = "\x1eRAAS\x1e"

_CONFINE = r"""
ws=$WS
confine() {
    case "$1" in /*) p=$1 ;; *) p=$ws/$1 ;; esac
    r=$(realpath -m -- "$p") || exit 90
    case "$r" in "$ws" | "$ws"/*) ;; *) echo "'$1' is outside the workspace $ws" >&2; exit 90 ;; esac
}
"""
_READ = (
    _CONFINE
    + r"""confine "$1"
[ -e "$r" ] || exit 91
[ -d "$r" ] && exit 92
[ "$(stat -c %s -- "$r")" -le "$2" ] || exit 93
exec cat -- "$r"
"""
)
_WRITE = (
    _CONFINE
    + r"""confine "$1"; [ -d "$r" ] && exit 92; mkdir -p -- "$(dirname -- "$r")" && exec cat > "$r" """
)
_LIST = (
    _CONFINE
    + r"""confine "$1"; cd "$r" || exit 91
find . -mindepth 1 $2 \( -name .git $3 -prune -o -print0 \)
"""
)
# The command runs in the background so that its whole process group (timeout's) can be
# killed when it returns: nothing it started may keep the output pipe open. $1 is only
# checked (the grep path); commands always start in the workspace.
_RUN = (
    _CONFINE
    + r"""confine "$1"; cd "$ws" || exit 91
{ timeout -s KILL "$2" bash -c "$3" </dev/null 2>&1 & p=$!; wait $p; rc=$?
  kill -KILL -- -$p 2>/dev/null; exit $rc; } | { head -c "$4"; printf '\n%s' "$5"; wc -c; }
printf '%s%s\n' "$5" "${PIPESTATUS[0]}"
"""
)


class ShellOps:
    """The helper's operations, done with coreutils, bash and rg in the container."""

    def __init__(self, api: APIClient, container_id: str, workspace: str, file_timeout_s: float) -> None:
        self._api = api
        self._container_id = container_id
        self._workspace = workspace
        self._file_timeout_s = file_timeout_s

    def read(self, path: str, max_bytes: int) -> bytes:
        out, code, err = self._script(_READ, [path, str(max_bytes)], self._file_timeout_s)
        self._check(code, err, path)
        return out

    def write(self, path: str, data: bytes) -> None:
        _, code, err = self._script(_WRITE, [path], self._file_timeout_s, stdin=data)
        self._check(code, err, path)

    def glob(self, pattern: str) -> list[str]:
        literal, parts = _split_pattern(pattern, self._workspace)
        depth = "" if "**" in parts else f"-maxdepth {len(parts) - len(literal)}"
        keep_git = "-false" if ".git" in parts else ""
        out, code, err = self._script(
            _LIST, ["/".join(literal) or ".", depth, keep_git], self._file_timeout_s
        )
        self._check(code, err, pattern)
        regex = helper.glob_regex("/".join(parts))
        found = (("/".join([*literal, p[2:]])) for p in out.decode("utf-8", "replace").split("\0") if p)
        return sorted(p for p in found if regex.fullmatch(p))

    def run(self, command: str, timeout_s: float, limit: int, confine: str = ".") -> dict[str, Any]:
        """``bash -c command`` in the workspace after checking ``confine``; the helper's result shape.

        Only the first ``limit`` bytes of output are kept (the helper keeps head and tail).
        """
        args = [confine, f"{timeout_s:g}", command, str(limit), _MARK]
        started = time.monotonic()
        out, code, err = self._script(_RUN, args, timeout_s + helper.BACKSTOP_S + 5)
        elapsed = time.monotonic() - started
        self._check(code, err, confine)
        # out is: output, "\n" MARK bytes-cut "\n", MARK exit-code "\n"
        front, _, rc_part = out.rpartition(_MARK.encode())
        body, _, count = front.rpartition(("\n" + _MARK).encode())
        exit_code = int(rc_part.strip() or -1)
        timed_out = exit_code == 137 and elapsed >= timeout_s - 0.05
        return {
            "exit_code": None if timed_out else exit_code,
            "head": body.decode("utf-8", "replace"),
            "tail": "",
            "cut": int(count.strip() or 0),
            "timed_out": timed_out,
        }

    def grep(
        self, pattern: str, path: str, glob: str | None, ignore_case: bool, **run: Any
    ) -> dict[str, Any]:
        argv = helper.rg_argv(pattern, _relative(path, self._workspace) or ".", glob, ignore_case)
        return self.run(shlex.join(argv), confine=path, **run)

    def _script(
        self, script: str, args: list[str], timeout_s: float, stdin: bytes | None = None
    ) -> tuple[bytes, int | None, str]:
        cmd = ["bash", "-c", script.replace("$WS", _quote(self._workspace)), "raas-fallback", *args]
        stream = ExecStream.open(self._api, self._container_id, cmd, stdin=stdin is not None)
        try:
            deadline = time.monotonic() + timeout_s
            if stdin is not None:
                stream.send(stdin, deadline)
                stream.close_stdin()
            out = stream.read_to_eof(deadline)
            return out, stream.exit_code(), stream.stderr.decode("utf-8", "replace").strip()
        finally:
            stream.close()

    @staticmethod
    def _check(code: int | None, err: str, path: str) -> None:
        if code == 0:
            return
        if code == _OUTSIDE:
            raise PathOutsideWorkspace(err or f"{path!r} is outside the workspace")
        errors = {_MISSING: errno.ENOENT, _IS_DIR: errno.EISDIR, _TOO_BIG: errno.EFBIG}
        if code in errors:
            raise OSError(errors[code], os.strerror(errors[code]), path)
        msg = f"sandbox shell operation on {path!r} failed (exit {code}): {err[-500:]}"
        raise SandboxError(msg)


def _split_pattern(pattern: str, workspace: str) -> tuple[list[str], list[str]]:
    """The pattern's segments and its leading literal directories (checked like the helper)."""
    pattern = _relative(pattern, workspace)
    if pattern.startswith("/"):
        msg = f"{pattern!r} is outside the workspace {workspace}"
        raise PathOutsideWorkspace(msg)
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        msg = f"{pattern!r} is outside the workspace"
        raise PathOutsideWorkspace(msg)
    literal: list[str] = []
    for p in parts[:-1]:
        if any(c in p for c in "*?["):
            break
        literal.append(p)
    return literal, parts


def _relative(path: str, workspace: str) -> str:
    """A path inside the workspace given absolutely, made relative; anything else as given."""
    root = workspace.rstrip("/")
    if path == root:
        return "."
    return path[len(root) + 1 :] if path.startswith(root + "/") else path


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
