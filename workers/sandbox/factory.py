"""Starting an iteration's sandbox from its config: the one place that builds one.

The config says which kind (a typed ``type`` discriminator, as SWE-ReX's deployments do):
``docker`` — a hardened container from an image, what a distributed worker always uses —
or ``local`` — subprocesses in the iteration's own scratch clone, for an embedded run with no
Docker engine (:mod:`workers.sandbox.choice` decides which and says so). Whatever the kind, the
iteration runner asks :func:`start_sandbox` through a :class:`SandboxFactory` (``factory_for``);
tests hand the runner a factory of their own. (The warm pool, :mod:`workers.sandbox.pool`, keeps started
Docker sandboxes of its own, for iterations with the default limits.)
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Annotated, Literal, Protocol

from docker.errors import APIError, DockerException
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import SandboxStartError
from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.container import SandboxMounts
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.local import LocalSandbox

log = logging.getLogger(__name__)
ENGINE_WAIT_S = 120.0


class DockerSandboxConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: Literal["docker"] = "docker"
    image: str
    engine_wait_s: float = Field(
        default=ENGINE_WAIT_S,
        ge=0,
        description="How long a Docker engine that does not answer (restarting, a socket proxy "
        "down) is waited for: an iteration failed for it would count against the project.",
    )


class LocalSandboxConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: Literal["local"] = "local"


SandboxConfig = Annotated[DockerSandboxConfig | LocalSandboxConfig, Field(discriminator="type")]


class SandboxFactory(Protocol):
    """Starts an iteration's sandbox on ``workdir`` (what the iteration runner calls).

    ``mounts`` comes only with a harness iteration (its agent CLI, the gateway's socket, a home).
    """

    def __call__(
        self,
        workdir: Path,
        limits: SandboxLimits,
        labels: dict[str, str],
        name: str,
        mounts: SandboxMounts | None = None,
    ) -> Sandbox: ...


def start_sandbox(
    config: SandboxConfig,
    workdir: Path,
    limits: SandboxLimits,
    labels: dict[str, str],
    name: str,
    mounts: SandboxMounts | None = None,
) -> Sandbox:
    """Start the iteration's sandbox as ``config`` says.

    Args:
        workdir: the iteration's workspace on this host (its own scratch clone).
        labels, name: the container's, so the reaper finds it (a local sandbox has neither).
        mounts: a harness iteration's binary, socket directory and home (Docker only; a local
            sandbox runs on the host, where the binary and the socket already are).

    Raises:
        SandboxStartError: it did not start (for Docker: not even after the engine wait).
    """
    if isinstance(config, LocalSandboxConfig):
        # The iteration runner hands every iteration a scratch clone of its own: working in
        # place is what keeps the local sandbox off the coordinator's repository.
        return LocalSandbox.start(host_workspace=workdir, limits=limits)
    deadline = time.monotonic() + config.engine_wait_s
    while True:
        try:
            return DockerSandbox.start(
                image=config.image,
                host_workspace=workdir,
                limits=limits,
                labels=labels,
                name=name,
                mounts=mounts,
            )
        except (SandboxStartError, OSError, DockerException) as exc:
            if not _unreachable(exc) or time.monotonic() > deadline:
                raise
            log.warning("Docker engine unreachable starting %s; retrying: %s", name, exc)
            time.sleep(2)


def factory_for(config: SandboxConfig) -> SandboxFactory:
    """``start_sandbox`` with ``config`` given: what the iteration runner is handed."""
    return functools.partial(start_sandbox, config)


def _unreachable(exc: BaseException) -> bool:
    """The Docker engine did not answer at all (as opposed to answering no: a name taken, no image)."""
    cause = exc.__cause__ if isinstance(exc, SandboxStartError) else exc
    if isinstance(cause, APIError):  # an answer; and an OSError too, through requests' exceptions
        return False
    return isinstance(cause, (OSError, DockerException))
