"""The in-sandbox helper: file and command operations confined to the workspace.

Pure stdlib, python3 only, because it is sent into the sandbox image as ``python3 -c SOURCE``
(the container's root is read-only, so nothing is installed there). Started once per
container, it reads JSON-line requests on stdin and answers JSON lines on stdout, which turns
every tool call into one round trip on an open stream instead of a ~70 ms ``docker exec``.
:class:`~workers.sandbox.local.LocalSandbox` imports the same functions and calls them
in-process, so both sandboxes share one implementation of confinement, capping and timeouts.

Protocol: the helper first prints ``{"ready": true}``; then for each request
``{"id": N, "op": "...", ...}`` it prints ``{"id": N, "ok": true, "result": {...}}`` or
``{"id": N, "ok": false, "kind": "outside"|"oserror"|"invalid", "errno": E, "message": "..."}``.
"""

# ruff: noqa: PTH100, PTH103, PTH117, PTH118, PTH120, PTH123
# (string paths and os.path on purpose: realpath on strings is the confinement check, and the
# script must stay importable by any python3 in any image.)
from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time

# Names for annotations only: every container starts this script, and typing and shutil were a
# quarter of its imports' time (``TYPE_CHECKING`` of our own: importing typing's is the cost).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

WORKSPACE = "/workspace"
DRAIN_AFTER_EXIT_S = 0.2  # output still arriving from background processes after the command ends
BACKSTOP_S = 2.0  # our own kill, in case `timeout` itself is stuck or missing
GONE_WITHIN_S = 2.0  # how long a killed process group may take to exit and be reaped
GLOB_LIMIT = 1000
CHUNK = 1 << 16  # a pipe's worth; bigger reads are slower (fresh 1 MiB buffers fault in)
_TIMEOUT_FOUND: bool | None = None


class Outside(Exception):
    """A path resolves outside the workspace.

    A local signal: this script runs inside the sandbox on the stdlib alone, so it cannot import
    shared.errors; the channel turns its ``outside`` answer into ``PathOutsideWorkspace``.
    """


def confine(root: str, path: object) -> str:
    """Resolve ``path`` (relative to ``root``, or absolute), following symlinks; refuse escapes."""
    if not isinstance(path, str) or "\0" in path:
        msg = "path must be a string without NUL bytes"
        raise ValueError(msg)
    real = os.path.realpath(os.path.join(root, path))
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        msg = f"{path!r} is outside the workspace {root}"
        raise Outside(msg)
    return real


def read_bytes(root: str, path: object, max_bytes: int | None) -> bytes:
    real = confine(root, path)
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            msg = f"file is {size} bytes, more than the {max_bytes} a read may return"
            raise OSError(27, msg, path)
        return f.read()


def write_bytes(root: str, path: object, data: bytes) -> int:
    real = confine(root, path)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return len(data)


def _segment_regex(seg: str) -> str:
    """One glob path segment as a regex; like bash, wildcards do not match a leading dot."""
    out = "" if seg.startswith(".") else r"(?!\.)"
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[" and "]" in seg[i + 2 :]:
            end = seg.index("]", i + 2)
            body = seg[i + 1 : end]
            out += "[" + ("^" + body[1:] if body[:1] in "!^" else body).replace("\\", "\\\\") + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return out


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Glob (``*``, ``?``, ``[..]``, ``**`` for any number of directories) as a compiled regex."""
    parts = pattern.split("/")
    out = ""
    for n, seg in enumerate(parts):
        last = n == len(parts) - 1
        if seg == "**":
            out += r"(?:(?!\.)[^/]+/)*" + (r"(?!\.)[^/]+" if last else "")
        else:
            out += _segment_regex(seg) + ("" if last else "/")
    return re.compile(out)


def glob_paths(root: str, pattern: str, limit: int = GLOB_LIMIT) -> tuple[list[str], int]:
    """Sorted workspace-relative paths matching ``pattern``; symlinks are listed, never followed."""
    if os.path.isabs(pattern):
        pattern = os.path.relpath(confine(root, pattern), root)
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        msg = f"{pattern!r} is outside the workspace {root}"
        raise Outside(msg)
    literal: list[str] = []
    for p in parts[:-1]:
        if any(c in p for c in "*?["):
            break
        literal.append(p)
    start = confine(root, "/".join(literal) or ".")
    regex = glob_regex("/".join(parts))
    max_depth = None if "**" in parts else len(parts)
    matches: list[str] = []
    for dirpath, dirnames, filenames in os.walk(start):
        rel_dir = os.path.relpath(dirpath, start)
        depth = 0 if rel_dir == "." else rel_dir.count("/") + 1
        prefix = "/".join(literal + ([] if rel_dir == "." else [rel_dir]))
        for name in dirnames + filenames:
            rel = f"{prefix}/{name}" if prefix else name
            if regex.fullmatch(rel):
                matches.append(rel)
        if max_depth is not None and depth + 1 >= max_depth:
            dirnames[:] = []
        elif ".git" not in parts:
            dirnames[:] = [d for d in dirnames if d != ".git"]
    matches.sort()
    return matches[:limit], max(0, len(matches) - limit)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait_group_gone(pid: int, within_s: float) -> None:
    """Wait until no process of group ``pid`` is left, not even a zombie.

    SIGKILL is delivered at once but each process exits when next scheduled, and its orphaned
    zombie waits for PID 1 to reap it: on a busy host a fork bomb's sixty processes take a while.
    A call that returns with them still there would leave the next call short of pids.
    """
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


class _Cap:
    """Keeps the first and last halves of at most ``limit`` bytes and counts what is cut."""

    def __init__(self, limit: int) -> None:
        self.head_max = limit // 2
        self.tail_max = limit - self.head_max
        self.head, self.tail, self.cut = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self.tail_max:
            self.cut += len(self.tail) + len(chunk) - self.tail_max
            self.tail = bytearray(chunk[len(chunk) - self.tail_max :])
        else:
            self.tail += chunk
            excess = len(self.tail) - self.tail_max
            if excess > 0:
                self.cut += excess
                del self.tail[:excess]


def _pump(proc: subprocess.Popen[bytes], cap: _Cap, timeout_s: float) -> float:
    """Read merged output until EOF, the deadline, or shortly after the command ended."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    started = time.monotonic()
    deadline = started + timeout_s + BACKSTOP_S
    ended_at = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if ended_at is None and proc.poll() is not None:
                ended_at = now
            until = deadline if ended_at is None else ended_at + DRAIN_AFTER_EXIT_S
            if now >= until:
                break
            if sel.select(min(until - now, 0.05)):
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                cap.add(chunk)
    return time.monotonic() - started


def _has_timeout() -> bool:
    """coreutils' `timeout`, present in the image; hosts without it rely on our backstop kill."""
    global _TIMEOUT_FOUND
    if _TIMEOUT_FOUND is None:
        import shutil  # noqa: PLC0415 (see the imports: once per helper, when a command first runs)

        _TIMEOUT_FOUND = shutil.which("timeout") is not None
    return _TIMEOUT_FOUND


def _reap(proc: subprocess.Popen[bytes], remaining_s: float) -> int:
    """Wait for the command itself (its output is at EOF), killing it when time is up."""
    try:
        return proc.wait(timeout=max(remaining_s, 0.0))
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        return proc.wait()


def run_capped(
    argv: list[str],
    cwd: str,
    timeout_s: float,
    limit: int,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``argv`` with a KILL timeout, stdout+stderr merged and capped at ``limit`` bytes.

    Whatever the command leaves running in the background is killed when it returns (its
    process group), so a fork bomb or a stray server cannot outlive the call.
    """
    wrapped = ["timeout", "-s", "KILL", f"{timeout_s:g}", *argv] if _has_timeout() else argv
    proc = subprocess.Popen(
        wrapped,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    cap = _Cap(limit)
    try:
        elapsed = _pump(proc, cap, timeout_s)
        _reap(proc, timeout_s + BACKSTOP_S - elapsed)
    finally:
        _kill_group(proc.pid)  # background leftovers, or everything if we never reaped
        if proc.stdout is not None:
            proc.stdout.close()
        code = proc.wait()
        _wait_group_gone(proc.pid, GONE_WITHIN_S)
    code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as a shell reports it
    timed_out = code == 137 and elapsed >= timeout_s - 0.05
    return {
        "exit_code": None if timed_out else code,
        "head": cap.head.decode("utf-8", "replace"),
        "tail": cap.tail.decode("utf-8", "replace"),
        "cut": cap.cut,
        "timed_out": timed_out,
    }


def rg_argv(pattern: str, rel: str, glob: str | None, ignore_case: bool) -> list[str]:
    """The ripgrep command line; ``rel`` "." keeps rg's paths free of a "./" prefix."""
    argv = ["rg", "--line-number", "--no-heading", "--color=never", "--max-columns=400"]
    argv.append("--max-columns-preview")
    if ignore_case:
        argv.append("--ignore-case")
    if glob:
        argv += ["--glob", glob]
    argv += ["--regexp", pattern]
    return argv if rel == "." else [*argv, "--", rel]


def grep_argv(root: str, pattern: str, path: str, glob: str | None, ignore_case: bool) -> list[str]:
    """:func:`rg_argv` for a confined ``path``, given relative to the workspace."""
    return rg_argv(pattern, os.path.relpath(confine(root, path), root), glob, ignore_case)


def _op_read(req: dict[str, Any]) -> dict[str, Any]:
    data = read_bytes(WORKSPACE, req["path"], req.get("max_bytes"))
    return {"data": base64.b64encode(data).decode("ascii")}


def _op_write(req: dict[str, Any]) -> dict[str, Any]:
    return {"bytes": write_bytes(WORKSPACE, req["path"], base64.b64decode(req["data"]))}


def _op_glob(req: dict[str, Any]) -> dict[str, Any]:
    paths, more = glob_paths(WORKSPACE, req["pattern"], req.get("limit", GLOB_LIMIT))
    return {"paths": paths, "more": more}


def _op_run(req: dict[str, Any]) -> dict[str, Any]:
    argv = ["bash", "-c", req["command"]]
    return run_capped(argv, WORKSPACE, req["timeout_s"], req["limit"])


def _op_grep(req: dict[str, Any]) -> dict[str, Any]:
    argv = grep_argv(
        WORKSPACE, req["pattern"], req.get("path", "."), req.get("glob"), req.get("ignore_case", False)
    )
    return run_capped(argv, WORKSPACE, req["timeout_s"], req["limit"])


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "read": _op_read,
    "write": _op_write,
    "glob": _op_glob,
    "run": _op_run,
    "grep": _op_grep,
    "ping": lambda req: {},
}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    """Answer one request; errors become a ``kind`` the host maps back to an exception."""
    try:
        return {"id": req.get("id"), "ok": True, "result": OPS[req["op"]](req)}
    except Outside as e:
        return {"id": req.get("id"), "ok": False, "kind": "outside", "message": str(e)}
    except OSError as e:
        return {
            "id": req.get("id"),
            "ok": False,
            "kind": "oserror",
            "errno": e.errno or 0,
            "message": e.strerror or str(e),
        }
    except (KeyError, TypeError, ValueError) as e:
        return {"id": req.get("id"), "ok": False, "kind": "invalid", "message": f"bad request: {e!r}"}


def main() -> None:
    global WORKSPACE
    WORKSPACE = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else WORKSPACE)
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        out.write(json.dumps(handle(json.loads(line))) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
