"""The sandbox interface every tool runs against, and the limits a project sets for it.

Implementations: :mod:`workers.sandbox.docker` (one hardened container per iteration, the
production path) and :mod:`workers.sandbox.local` (a subprocess in the worker's scratch copy,
for hosts with no Docker engine).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Generator
from types import TracebackType
from typing import Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.errors import SandboxError

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([bkmg]?)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_MIN_MEMORY_BYTES = 6 * 1024**2  # Docker refuses less than 6 MiB

TRUNCATION_NOTE = "[output truncated: {cut} bytes cut]"


def parse_size(value: str) -> int:
    """Bytes in a Docker size string ("512m", "2g", "1048576"); ValueError with an example if not."""
    match = _SIZE.match(value.strip())
    if not match:
        msg = f'{value!r} is not a size (e.g. "512m", "2g")'
        raise ValueError(msg)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


class SandboxLimits(BaseModel):
    """What one iteration's sandbox may use: the ``[sandbox]`` table of a project's raas.toml."""

    model_config = ConfigDict(extra="forbid")

    memory: str = Field(default="1g", description='Memory limit, a Docker size ("512m", "2g").')
    """Memory limit (RAM, no swap); the OOM killer stops the command that exceeds it."""
    cpus: float = Field(default=1.0, gt=0, le=256, description="CPU limit in cores.")
    """CPU limit in cores (fractions allowed)."""
    pids: int = Field(default=256, ge=16, description="Maximum number of processes.")
    """Maximum number of processes and threads at once; stops fork bombs."""
    network: bool = Field(default=False, description="Allow network access.")
    """False: the container has only its own loopback interface."""
    command_timeout_s: float = Field(default=120.0, gt=0, description="Timeout of one command.")
    """A command still running after this many seconds is killed (and so is what it started)."""
    output_limit_bytes: int = Field(default=30_000, ge=1000, description="Output cap per command.")
    """Output beyond this is cut from the middle, with a note saying how many bytes."""

    @field_validator("memory")
    @classmethod
    def _memory_is_a_size(cls, value: str) -> str:
        if parse_size(value) < _MIN_MEMORY_BYTES:
            msg = f"{value!r} is too little memory; give at least 6m"
            raise ValueError(msg)
        return value

    @property
    def memory_bytes(self) -> int:
        return parse_size(self.memory)


class ExecResult(BaseModel):
    """A finished command: merged stdout+stderr, capped; ``exit_code`` is None if it timed out."""

    exit_code: int | None
    output: str
    truncated_bytes: int = 0
    timed_out: bool = False

    @classmethod
    def capped(cls, output: str, limit: int, exit_code: int | None) -> ExecResult:
        """Cap an output that is already in memory the way the sandbox caps a command's."""
        data = output.encode()
        if len(data) <= limit:
            return cls(exit_code=exit_code, output=output)
        head, tail = data[: limit // 2], data[len(data) - (limit - limit // 2) :]
        cut = len(data) - len(head) - len(tail)
        return cls.from_capped(
            head.decode(errors="replace"), tail.decode(errors="replace"), cut, exit_code, False
        )

    @classmethod
    def from_capped(
        cls, head: str, tail: str, cut: int, exit_code: int | None, timed_out: bool
    ) -> ExecResult:
        """Join the kept head and tail of an output, marking the cut between them."""
        output = head + tail
        if cut:
            sep = "" if head.endswith("\n") or not head else "\n"
            output = f"{head}{sep}{TRUNCATION_NOTE.format(cut=cut)}\n{tail}"
        return cls(exit_code=exit_code, output=output, truncated_bytes=cut, timed_out=timed_out)


class AgentProcess(Protocol):
    """An agent CLI running in a sandbox (:meth:`Sandbox.spawn`): read ``lines()`` to its end,
    then ``exit_code`` and ``timed_out`` say how it ended."""

    exit_code: int | None
    timed_out: bool

    def lines(self) -> Generator[str, None, None]: ...

    def stderr_tail(self, max_lines: int = 20) -> str: ...


class Sandbox(ABC):
    """Where an iteration's tools run. Paths are relative to the workspace (or absolute inside it).

    Every path is resolved, symlinks followed, and must stay inside the workspace, or the
    call raises :class:`shared.errors.PathOutsideWorkspace`. File errors are the builtin
    ``OSError`` subclasses (``FileNotFoundError``, ``IsADirectoryError``...). A sandbox that
    cannot do what was asked raises :class:`shared.errors.SandboxError`; a command's own
    failure is not an error, it is an :class:`ExecResult`.
    """

    workspace_path: str
    limits: SandboxLimits

    @abstractmethod
    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``bash -c command`` in the workspace, output merged and capped.

        ``timeout_s`` defaults to ``limits.command_timeout_s``; the command and everything it
        started are killed then (``timed_out=True``). Background processes are killed when the
        command returns.
        """

    @abstractmethod
    def read_file(self, path: str) -> bytes:
        """The file's bytes."""

    @abstractmethod
    def write_file(self, path: str, data: bytes) -> None:
        """Create or overwrite the file, creating parent directories."""

    @abstractmethod
    def list_glob(self, pattern: str) -> list[str]:
        """Sorted workspace-relative paths matching ``pattern`` (``**`` spans directories).

        As in bash, wildcards do not match names starting with a dot unless the pattern
        spells the dot; ``.git`` is not searched unless named; symlinks are not followed.
        """

    @abstractmethod
    def grep(
        self, pattern: str, path: str = ".", glob: str | None = None, ignore_case: bool = False
    ) -> ExecResult:
        """ripgrep ``pattern`` (a Rust regex) under ``path``: ``file:line:text`` lines, capped.

        Exit code 0 with matches, 1 with none, 2 on an error (e.g. a bad regex).
        """

    def spawn(self, argv: list[str], env: dict[str, str], timeout_s: float) -> AgentProcess:
        """Start a long-running agent CLI in the workspace, its stdout read as it comes.

        Past ``timeout_s`` it is killed. Sandboxes that cannot run one raise SandboxError.
        """
        msg = f"a {type(self).__name__} cannot run an agent CLI"
        raise SandboxError(msg)

    @abstractmethod
    def close(self) -> None:
        """Release everything the sandbox holds; safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
