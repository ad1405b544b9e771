"""A sandbox without Docker: plain subprocesses in the worker's private copy of the workspace.

For embedded mode on hosts with no Docker engine. It keeps the file tools inside the
workspace (the same confinement code as the in-container helper), scrubs the environment,
times commands out and caps their output, but it isolates nothing else: commands run with
the worker's own user, network and filesystem. Whoever chooses it says so to the user.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import TypeVar

from shared.errors import InvalidInput, PathOutsideWorkspace, SandboxError
from workers.sandbox import helper
from workers.sandbox.base import AgentProcess, ExecResult, Sandbox, SandboxLimits
from workers.sandbox.process import HostProcess

T = TypeVar("T")
READ_LIMIT_BYTES = 32 * 1024**2
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalSandbox(Sandbox):
    """Tools run directly in ``host_workspace``, which must be a copy private to this iteration."""

    def __init__(self, workspace: Path, limits: SandboxLimits) -> None:
        self.workspace_path = str(workspace.resolve())
        self.limits = limits
        self._home = tempfile.mkdtemp(prefix="raas-sandbox-home-")
        # Nothing of the worker's environment but PATH: never its API key.
        self._env = {
            "HOME": self._home,
            "TMPDIR": self._home,
            "LANG": "C.UTF-8",
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
        }
        self._closed = False

    @classmethod
    def start(cls, *, host_workspace: Path, limits: SandboxLimits) -> LocalSandbox:
        if not host_workspace.is_dir():
            msg = f"workspace {host_workspace} is not a directory"
            raise InvalidInput(msg)
        return cls(host_workspace, limits)

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        timeout = self.limits.command_timeout_s if timeout_s is None else timeout_s
        result = helper.run_capped(
            ["bash", "-c", command],
            self.workspace_path,
            timeout,
            self.limits.output_limit_bytes,
            env=self._env,
        )
        return ExecResult.from_capped(**result)

    def read_file(self, path: str) -> bytes:
        return _confined(lambda: helper.read_bytes(self.workspace_path, path, READ_LIMIT_BYTES))

    def write_file(self, path: str, data: bytes) -> None:
        _confined(lambda: helper.write_bytes(self.workspace_path, path, data))

    def list_glob(self, pattern: str) -> list[str]:
        return _confined(lambda: helper.glob_paths(self.workspace_path, pattern)[0])

    def grep(
        self, pattern: str, path: str = ".", glob: str | None = None, ignore_case: bool = False
    ) -> ExecResult:
        argv = _confined(lambda: helper.grep_argv(self.workspace_path, pattern, path, glob, ignore_case))
        if shutil.which("rg", path=self._env["PATH"]):
            result = helper.run_capped(
                argv,
                self.workspace_path,
                self.limits.command_timeout_s,
                self.limits.output_limit_bytes,
                env=self._env,
            )
            return ExecResult.from_capped(**result)
        return self._grep_python(pattern, argv[-1] if "--" in argv else ".", glob, ignore_case)

    @property
    def home(self) -> str:
        """The sandbox's own HOME (removed with it)."""
        return self._home

    def spawn(self, argv: list[str], env: dict[str, str], timeout_s: float) -> AgentProcess:
        """Run an agent CLI on the host in the workspace, with the host user's privileges."""
        if self._closed:
            msg = "the local sandbox is closed"
            raise SandboxError(msg)
        return HostProcess(argv, {**self._env, **env}, self.workspace_path, timeout_s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            shutil.rmtree(self._home, ignore_errors=True)

    def _grep_python(self, pattern: str, rel: str, glob: str | None, ignore_case: bool) -> ExecResult:
        """Without ripgrep on the host: the same output shape, no .gitignore support."""
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as e:
            return ExecResult(exit_code=2, output=f"regex parse error: {e}\n")
        lines: list[str] = []
        for file in _text_files(Path(self.workspace_path), rel, glob):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                text = (Path(self.workspace_path) / file).read_text("utf-8")
                lines += [
                    f"{file}:{n}:{line}" for n, line in enumerate(text.splitlines(), 1) if regex.search(line)
                ]
        output = "".join(f"{line}\n" for line in lines)
        return ExecResult.capped(output, self.limits.output_limit_bytes, 0 if lines else 1)


def _text_files(root: Path, rel: str, glob: str | None) -> Iterator[str]:
    start = root / rel
    if start.is_file():
        yield rel
        return
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            file = os.path.relpath(os.path.join(dirpath, name), root)  # noqa: PTH118
            if not name.startswith(".") and (
                glob is None or fnmatch(name if "/" not in glob else file, glob)
            ):
                yield file


def _confined(op: Callable[[], T]) -> T:
    """The helper's errors as the sandbox interface promises them."""
    try:
        return op()
    except helper.Outside as e:
        raise PathOutsideWorkspace(str(e)) from e
    except ValueError as e:
        raise InvalidInput(str(e)) from e
