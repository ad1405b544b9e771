"""How a sandbox container is made: the hardening of DESIGN.md rule 4 as Docker configuration.

Read-only root, no capabilities, no new privileges, uid 1000, memory (no swap), CPU and PID
limits, no network unless the project allows it, docker-init as PID 1 (it reaps orphans, so
dead processes never hold PIDs), a tmpfs ``/tmp`` as HOME, nothing of the host's environment,
and the Docker socket never mounted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound
from docker.types import LogConfig
from pydantic import BaseModel, ConfigDict

from shared.errors import SandboxStartError
from workers.sandbox.base import SandboxLimits
from workers.sandbox.channel import helper_command
from workers.sandbox.relay import PROXY_DIR, PROXY_ENV

WORKSPACE = "/workspace"
SANDBOX_UID = SANDBOX_GID = 1000
MANAGED_LABEL = "raas.managed"
# Everything a command sees of the environment: nothing of the host's is passed in.
SANDBOX_ENV = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}
BUILD_HINT = "build it with deploy/sandbox/build-offline.sh (no registry needed)"
AGENT_HOME = "/home/agent"


class SandboxMounts(BaseModel):
    """What a harness iteration's container has beyond the workspace (fixed at creation).

    The agent CLI's binary and the gateway's socket directory come in read-only (a unix socket
    on a read-only mount still accepts connections); ``home`` adds a writable tmpfs home owned by
    the sandbox user, which the CLIs need for their settings and session files.
    """

    model_config = ConfigDict(frozen=True)

    read_only: tuple[tuple[str, str], ...] = ()
    """(host path, container path) pairs."""
    home: bool = False
    image: str | None = None
    """The project's environment snapshot, instead of the worker's sandbox image."""
    env: tuple[tuple[str, str], ...] = ()
    """The project's environment variables, over the sandbox's own."""
    proxy_dir: str | None = None
    """The egress proxy's socket directory (``registries``): mounted read-only at PROXY_DIR, a
    relay started inside and the proxy variables set (:mod:`workers.sandbox.relay`)."""

    def merged(self, other: SandboxMounts | None) -> SandboxMounts:
        """These and ``other``'s (a harness's binary and home) together."""
        if other is None:
            return self
        return self.model_copy(update={"read_only": self.read_only + other.read_only, "home": other.home})


def host_config(
    client: docker.DockerClient,
    host_workspace: Path,
    limits: SandboxLimits,
    mounts: SandboxMounts | None = None,
) -> dict[str, Any]:
    """The hardening of DESIGN.md rule 4, as Docker host configuration."""
    memory = limits.memory_bytes
    cpus = min(limits.cpus, float(os.cpu_count() or 1))  # Docker refuses more than the host has
    binds = {str(host_workspace): {"bind": WORKSPACE, "mode": "rw"}}
    tmpfs = {"/tmp": f"rw,nosuid,nodev,size={memory},mode=1777"}
    if mounts is not None:
        binds.update({host: {"bind": inside, "mode": "ro"} for host, inside in mounts.read_only})
        if mounts.proxy_dir is not None:
            binds[mounts.proxy_dir] = {"bind": PROXY_DIR, "mode": "ro"}
        if mounts.home:
            ids = f"uid={SANDBOX_UID},gid={SANDBOX_GID}"
            tmpfs[AGENT_HOME] = f"rw,nosuid,nodev,size={memory},mode=700,{ids}"
    config: dict[str, Any] = client.api.create_host_config(
        binds=binds,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs=tmpfs,
        mem_limit=memory,
        memswap_limit=memory,  # no swap: the memory limit is the limit
        nano_cpus=int(cpus * 1e9),
        pids_limit=limits.pids,
        network_mode="bridge" if limits.network else "none",
        init=True,
        ipc_mode="private",
        log_config=LogConfig(type="none"),
    )
    return config


def chown_workspace(root: Path) -> None:
    """Give the workspace to the sandbox user (1000:1000) so that it can write there."""
    try:
        for path in [root, *root.rglob("*")]:
            st = path.lstat()
            if (st.st_uid, st.st_gid) != (SANDBOX_UID, SANDBOX_GID):
                os.lchown(path, SANDBOX_UID, SANDBOX_GID)
    except PermissionError as e:
        msg = (
            f"cannot give {e.filename} to uid {SANDBOX_UID}, the sandbox user: run the worker as root "
            f"or as uid {SANDBOX_UID}, or create the workspace owned by it"
        )
        raise SandboxStartError(msg) from e


def create(
    client: docker.DockerClient,
    image: str,
    workspace: Path,
    limits: SandboxLimits,
    labels: dict[str, str],
    name: str,
    mounts: SandboxMounts | None = None,
) -> str:
    """Create (not start) the container; its id."""
    environment = SANDBOX_ENV
    if mounts is not None:
        environment = {**dict(mounts.env), **SANDBOX_ENV}
        if mounts.home:
            environment["HOME"] = AGENT_HOME
        if mounts.proxy_dir is not None:
            environment.update(PROXY_ENV)
        image = mounts.image or image
    try:
        created = client.api.create_container(
            image,
            command=helper_command(WORKSPACE),
            # The helper reads its requests on stdin, through an attached stream; docker-py then
            # sets StdinOnce: closing that stream closes the helper's stdin and it ends.
            stdin_open=True,
            name=name,
            user=f"{SANDBOX_UID}:{SANDBOX_GID}",
            working_dir=WORKSPACE,
            environment=environment,
            labels={**labels, MANAGED_LABEL: "true"},
            hostname="sandbox",
            host_config=host_config(client, workspace, limits, mounts),
        )
    except ImageNotFound as e:
        msg = f"sandbox image {image!r} is not on this Docker engine; {BUILD_HINT}"
        raise SandboxStartError(msg) from e
    except APIError as e:
        if e.status_code == 409:
            msg = f"a container named {name!r} already exists; sandbox names must be unique per attempt"
            raise SandboxStartError(msg) from e
        msg = f"cannot create sandbox {name!r}: {e.explanation or e}"
        raise SandboxStartError(msg) from e
    container_id: str = created["Id"]
    return container_id
