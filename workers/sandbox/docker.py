"""One hardened Docker container per iteration attempt; every tool call runs inside it.

The container (hardened as :mod:`workers.sandbox.container` says) runs the in-container helper
as its own command (:func:`~workers.sandbox.channel.helper_command`), attached before it starts;
each tool call is then one JSON line each way on that open stream. A client-side deadline
guards every call (docker-py has no exec timeout): on overrun the container is killed and the
call raises :class:`~shared.errors.ToolTimeout`. A process has a few container creates and
removals in flight at once (:data:`ENGINE_CALLS`), however many iterations it runs.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import docker
from docker.errors import APIError, DockerException, NotFound

from shared.errors import SandboxError, SandboxStartError, StreamClosed, ToolTimeout
from workers.sandbox import helper
from workers.sandbox.base import ExecResult, Sandbox, SandboxLimits
from workers.sandbox.channel import DeadlineExceeded, ExecStream, HelperClient, b64
from workers.sandbox.container import (
    MANAGED_LABEL,
    SANDBOX_GID,
    SANDBOX_UID,
    WORKSPACE,
    SandboxMounts,
    chown_workspace,
    create,
)
from workers.sandbox.fallback import ShellOps
from workers.sandbox.process import ContainerProcess
from workers.sandbox.relay import start_relay

__all__ = ["MANAGED_LABEL", "DockerSandbox"]
log = logging.getLogger(__name__)

T = TypeVar("T")
FILE_OP_TIMEOUT_S = 30.0
READ_LIMIT_BYTES = 32 * 1024**2
HELPER_START_TIMEOUT_S = 30.0
_DEADLINE_MARGIN_S = 5.0
_api_versions: dict[str, str] = {}  # DOCKER_HOST -> the API version its engine answered
_api_versions_lock = threading.Lock()


class EngineGate:
    """How many container creates and removals one process has the engine do at once.

    A threads worker's 100 iterations arriving together asked the engine for 100 containers in
    parallel. The engine, the runtime and the kernel's mount and cgroup locks then spent ~10%
    more CPU per container (0.205 against 0.182 machine CPU s with 4 at a time, 200 containers
    on this 2-core machine) and finished the lot no sooner. Iterations past the limit wait for
    a turn; the CPU they would have contended for goes to the ones running.
    """

    def __init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.default())

    @staticmethod
    def default() -> int:
        return 2 * (os.cpu_count() or 1)

    def limit(self, calls: int | None) -> None:
        """At most ``calls`` at once from now on (None: :meth:`default`); turns taken run out."""
        self._slots = threading.BoundedSemaphore(calls or self.default())

    @contextmanager
    def turn(self) -> Iterator[None]:
        slots = self._slots  # the one released is the one acquired, across a limit()
        with slots:
            yield


ENGINE_CALLS = EngineGate()


def engine_client(timeout_s: int = 60) -> docker.DockerClient:
    """A Docker client for this process's engine, its API version asked once per process.

    ``docker.from_env()`` asks the engine for its version (``GET /version``) every time; a
    sandbox per iteration made that one more request per iteration for an answer that never
    changes while the process lives. ``timeout_s`` bounds each request (an environment's setup
    is one long request).
    """
    host = os.environ.get("DOCKER_HOST", "")
    version = _api_versions.get(host)
    if version is not None:
        return docker.from_env(version=version, timeout=timeout_s)
    client = docker.from_env(timeout=timeout_s)
    with _api_versions_lock:
        _api_versions[host] = client.api.api_version
    return client


class DockerSandbox(Sandbox):
    """A running sandbox container; make one with :meth:`start`, end it with :meth:`close`."""

    workspace_path = WORKSPACE

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        name: str,
        limits: SandboxLimits,
        host_workspace: Path,
    ) -> None:
        self.client = client
        self.host_workspace = host_workspace  # the host directory mounted at /workspace
        self.container_id = container_id
        self.name = name
        self.limits = limits
        self._helper: HelperClient | None = None
        self._shell: ShellOps | None = None
        self._lock = threading.Lock()
        self._killed: str | None = None
        self._closed = False
        self.removed = False  # set by close() once the engine has no such container
        self._owns_client = False  # closed with the sandbox (start() made it)

    @classmethod
    def start(
        cls,
        *,
        image: str,
        host_workspace: Path,
        limits: SandboxLimits,
        labels: dict[str, str],
        name: str,
        client: docker.DockerClient | None = None,
        mounts: SandboxMounts | None = None,
    ) -> DockerSandbox:
        """Create and start the container and its helper.

        Raises:
            SandboxStartError: no Docker engine, no such image, the name is taken, or the
                container or its helper did not start.
        """
        owns_client = client is None
        try:
            # A client of its own unless given one: many sandboxes of one process (a threads
            # worker's iterations) then never share a connection pool across threads.
            client = client or engine_client()
        except DockerException as e:
            msg = f"cannot reach the Docker engine: {e}"
            raise SandboxStartError(msg) from e
        workspace = host_workspace.resolve()
        try:
            chown_workspace(workspace)
            with ENGINE_CALLS.turn():
                container_id = create(client, image, workspace, limits, labels, name, mounts)
        except BaseException:
            if owns_client:
                client.close()
            raise
        sandbox = cls(client, container_id, name, limits, workspace)
        sandbox._owns_client = owns_client
        try:
            with ENGINE_CALLS.turn():
                attached = ExecStream.attach(client.api, container_id)  # before the start: see channel
                try:
                    client.api.start(container_id)
                except BaseException:
                    attached.close()  # not the helper's yet: close() would not see it
                    raise
                if mounts is not None and mounts.proxy_dir is not None:
                    start_relay(client.api, container_id, f"{SANDBOX_UID}:{SANDBOX_GID}")
            sandbox._helper = HelperClient.ready(attached, HELPER_START_TIMEOUT_S)
            if sandbox._helper is None:
                sandbox._use_shell()
        except Exception as e:
            sandbox.close()
            if isinstance(e, SandboxStartError):
                raise
            msg = f"sandbox {name} did not start: {e}"
            raise SandboxStartError(msg) from e
        log.debug("sandbox %s started (%s)", name, "helper" if sandbox._helper else "shell fallback")
        return sandbox

    @property
    def uses_helper(self) -> bool:
        """False when the image has no python3 and every call is a plain ``docker exec``."""
        return self._helper is not None

    @property
    def is_usable(self) -> bool:
        """False once closed or killed (an overrun deadline): such a sandbox serves no one again."""
        return not self._closed and self._killed is None

    def is_responsive(self, timeout_s: float = 2.0) -> bool:
        """True if the container still answers (a pooled sandbox may have died while idle)."""
        try:
            self._call(
                "ping", timeout_s, lambda h, t: h.request("ping", t), lambda s: s.run("true", timeout_s, 100)
            )
        except SandboxError:
            return False
        return True

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        timeout = self.limits.command_timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            msg = f"timeout_s must be positive, not {timeout}"
            raise ValueError(msg)
        limit = self.limits.output_limit_bytes
        result = self._call(
            "run",
            timeout + helper.BACKSTOP_S + _DEADLINE_MARGIN_S,
            lambda h, t: h.request("run", t, command=command, timeout_s=timeout, limit=limit),
            lambda s: s.run(command, timeout, limit),
        )
        return _exec_result(result)

    def read_file(self, path: str) -> bytes:
        return self._call(
            "read",
            FILE_OP_TIMEOUT_S,
            lambda h, t: _unb64(h.request("read", t, path=path, max_bytes=READ_LIMIT_BYTES)["data"]),
            lambda s: s.read(path, READ_LIMIT_BYTES),
        )

    def write_file(self, path: str, data: bytes) -> None:
        self._call(
            "write",
            FILE_OP_TIMEOUT_S,
            lambda h, t: h.request("write", t, path=path, data=b64(data)),
            lambda s: s.write(path, data),
        )

    def list_glob(self, pattern: str) -> list[str]:
        return self._call(
            "glob",
            FILE_OP_TIMEOUT_S,
            lambda h, t: list(h.request("glob", t, pattern=pattern)["paths"]),
            lambda s: s.glob(pattern),
        )

    def grep(
        self, pattern: str, path: str = ".", glob: str | None = None, ignore_case: bool = False
    ) -> ExecResult:
        timeout, limit = self.limits.command_timeout_s, self.limits.output_limit_bytes
        result = self._call(
            "grep",
            timeout + helper.BACKSTOP_S + _DEADLINE_MARGIN_S,
            lambda h, t: h.request(
                "grep",
                t,
                pattern=pattern,
                path=path,
                glob=glob,
                ignore_case=ignore_case,
                timeout_s=timeout,
                limit=limit,
            ),
            lambda s: s.grep(pattern, path, glob, ignore_case, timeout_s=timeout, limit=limit),
        )
        return _exec_result(result)

    def spawn(self, argv: list[str], env: dict[str, str], timeout_s: float) -> ContainerProcess:
        """Start ``argv`` in the container beside the helper (an agent CLI), its output streamed.

        Past ``timeout_s`` the whole container is killed (a hung agent's run ends; what it wrote
        stays in the workspace) and the process's ``timed_out`` says so.
        """
        if self._closed or self._killed:
            msg = f"sandbox {self.name} is {'closed' if self._closed else self._killed}"
            raise SandboxError(msg)
        return ContainerProcess.start(
            self.client.api,
            self.container_id,
            argv,
            env,
            WORKSPACE,
            timeout_s,
            on_timeout=lambda: self._kill(f"killed after its agent overran its {timeout_s:.0f} s limit"),
        )

    def close(self) -> None:
        """Stop the helper and remove the container (killing whatever runs in it)."""
        if self._closed:
            return
        self._closed = True
        if self._helper is not None:
            try:
                self._helper.close()
            except (DockerException, OSError) as e:
                log.warning("could not stop the helper of sandbox %s: %s", self.name, e)
        try:
            with ENGINE_CALLS.turn():
                self.client.api.remove_container(self.container_id, force=True)
            self.removed = True
        except NotFound:
            self.removed = True
        except (APIError, DockerException, OSError) as e:  # the sweep removes it later: it is labelled
            log.warning("could not remove sandbox %s: %s", self.name, e)
        if self._owns_client:
            self.client.close()

    def _connect(self) -> None:
        api = self.client.api
        self._helper = HelperClient.start(api, self.container_id, WORKSPACE, HELPER_START_TIMEOUT_S)
        if self._helper is None:
            self._use_shell()

    def _use_shell(self) -> None:
        log.info("image of sandbox %s has no python3; using one docker exec per call", self.name)
        self._shell = ShellOps(self.client.api, self.container_id, WORKSPACE, FILE_OP_TIMEOUT_S)

    def _call(
        self,
        op: str,
        timeout_s: float,
        via_helper: Callable[[HelperClient, float], T],
        via_shell: Callable[[ShellOps], T],
    ) -> T:
        """Run one operation under a deadline; kill the container if it is overrun."""
        with self._lock:
            if self._closed or self._killed:
                msg = f"sandbox {self.name} is {'closed' if self._closed else self._killed}"
                raise SandboxError(msg)
            try:
                if self._helper is not None:
                    return via_helper(self._helper, timeout_s)
                assert self._shell is not None
                return via_shell(self._shell)
            except DeadlineExceeded as e:
                self._kill(f"killed after {op} overran its {timeout_s:.0f} s deadline")
                msg = f"the sandbox did not answer {op} within {timeout_s:.0f} s and was killed"
                raise ToolTimeout(msg) from e
            except StreamClosed as e:
                self._restart_helper()
                msg = f"the sandbox helper stopped during {op} (out of memory?) and was restarted: {e}"
                raise SandboxError(msg) from e

    def _kill(self, reason: str) -> None:
        self._killed = reason
        log.warning("sandbox %s %s", self.name, reason)
        try:
            self.client.api.kill(self.container_id)
        except APIError as e:
            log.warning("could not kill sandbox %s: %s", self.name, e)

    def _restart_helper(self) -> None:
        if self._helper is not None:
            self._helper.close()
        try:
            self._connect()
        except Exception as e:
            self._killed = f"broken (its helper could not restart: {e})"


def _exec_result(result: dict[str, Any]) -> ExecResult:
    return ExecResult.from_capped(
        head=result["head"],
        tail=result["tail"],
        cut=int(result["cut"]),
        exit_code=result["exit_code"],
        timed_out=bool(result["timed_out"]),
    )


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)
