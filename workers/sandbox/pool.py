"""A warm pool of started sandboxes, so an iteration does not wait ~300 ms for its container.

A container's mounts, labels and network mode are fixed when it is created, so a pooled
sandbox is made before its iteration is known: it mounts an empty workspace directory of its
own (``sandbox.host_workspace``) that :meth:`SandboxPool.acquire` fills through the caller's
``populate`` (e.g. fetching the project's workspace into it), and it carries the pool's labels
(say ``raas.worker``) rather than the iteration's. A pool serves one set of limits; callers
whose project sets others start a sandbox cold with :meth:`DockerSandbox.start`.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import docker

from shared.errors import SandboxError
from workers.sandbox.base import SandboxLimits
from workers.sandbox.container import chown_workspace
from workers.sandbox.docker import DockerSandbox

log = logging.getLogger(__name__)
POOL_LABEL = "raas.pool"
_RETRY_AFTER_FAILURE_S = 5.0


class SandboxPool:
    """Keeps ``size`` started sandboxes ready; a background thread refills it."""

    def __init__(
        self,
        *,
        size: int,
        image: str,
        limits: SandboxLimits,
        labels: dict[str, str],
        client: docker.DockerClient | None = None,
        name_prefix: str = "raas-pool",
        scratch_dir: Path | None = None,
    ) -> None:
        self.size = size
        self.image = image
        self.limits = limits
        self.name_prefix = name_prefix
        self._labels = {**labels, POOL_LABEL: name_prefix}
        # None: each sandbox gets a client of its own, as the threads using them do.
        self._client = client
        self._scratch = scratch_dir or Path(tempfile.mkdtemp(prefix="raas-pool-"))
        self._ready: deque[DockerSandbox] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._filler = threading.Thread(target=self._fill_forever, name=f"{name_prefix}-filler", daemon=True)
        self._filler.start()

    def acquire(
        self, populate: Callable[[Path], None] | None = None, *, timeout_s: float = 0.0
    ) -> DockerSandbox:
        """A started sandbox whose workspace ``populate`` has filled and the sandbox user owns.

        Waits up to ``timeout_s`` for a warm one, then starts one cold. The caller closes it
        as usual and removes ``sandbox.host_workspace`` when done with the files.
        """
        sandbox = self._take_warm(timeout_s) or self._start_one()
        if populate is not None:
            try:
                populate(sandbox.host_workspace)
                chown_workspace(sandbox.host_workspace)
            except BaseException:
                sandbox.close()
                raise
        return sandbox

    def wait_until_full(self, timeout_s: float) -> bool:
        """True once ``size`` sandboxes are ready (tests and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            return self._cond.wait_for(
                lambda: len(self._ready) >= self.size, max(0.0, deadline - time.monotonic())
            )

    def close(self) -> None:
        """Stop refilling and remove every sandbox not handed out."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._filler.join(timeout=30)
        while self._ready:
            sandbox = self._ready.popleft()
            sandbox.close()
            shutil.rmtree(sandbox.host_workspace, ignore_errors=True)

    def _take_warm(self, timeout_s: float) -> DockerSandbox | None:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ready), max(0.0, deadline - time.monotonic()))
                if not self._ready:
                    return None
                sandbox = self._ready.popleft()
                self._cond.notify_all()  # the filler makes another
            if sandbox.is_responsive():
                return sandbox
            log.warning("pooled sandbox %s died while idle; discarding it", sandbox.name)
            sandbox.close()

    def _start_one(self) -> DockerSandbox:
        workspace = self._scratch / secrets.token_hex(8)
        workspace.mkdir(parents=True)
        return DockerSandbox.start(
            image=self.image,
            host_workspace=workspace,
            limits=self.limits,
            labels=self._labels,
            name=f"{self.name_prefix}-{workspace.name}",
            client=self._client,
        )

    def _fill_forever(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or len(self._ready) < self.size)
                if self._closed:
                    return
            try:
                sandbox = self._start_one()
            except SandboxError as e:
                log.warning("sandbox pool %s cannot start a sandbox: %s", self.name_prefix, e)
                time.sleep(_RETRY_AFTER_FAILURE_S)
                continue
            with self._cond:
                if self._closed:
                    sandbox.close()
                    return
                self._ready.append(sandbox)
                self._cond.notify_all()
