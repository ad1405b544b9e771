"""Choosing where an embedded run's tools execute: Docker when it can, the local sandbox otherwise.

A distributed worker always uses Docker (:func:`workers.iteration.docker_sandbox`). An embedded
run (``raas run``) may be on a laptop with no engine; it then falls back to
:class:`~workers.sandbox.local.LocalSandbox` and says so, because that sandbox isolates nothing
but the file tools. ``RAAS_SANDBOX`` (or ``raas run --sandbox``) forces one kind: ``docker``
refuses to run without an engine and its image, ``local`` never looks for Docker.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shared.errors import SandboxStartError
from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.local import LocalSandbox

SandboxKind = Literal["auto", "docker", "local"]
BUILD_HINT = "build it with deploy/sandbox/build-offline.sh (or docker build -t IMAGE deploy/sandbox)"
LOCAL_NOTICE = (
    "running tools in a local sandbox (a private copy of the workspace; no network or memory isolation)"
)


class Factory:
    """A SandboxFactory (see :class:`workers.iteration.SandboxFactory`) for one kind of sandbox."""

    def __init__(self, kind: Literal["docker", "local"], image: str) -> None:
        self.kind = kind
        self.image = image

    def __call__(self, workdir: Path, limits: SandboxLimits, labels: dict[str, str], name: str) -> Sandbox:
        if self.kind == "docker":
            return DockerSandbox.start(
                image=self.image, host_workspace=workdir, limits=limits, labels=labels, name=name
            )
        # The iteration runner hands every iteration a scratch clone of its own: working in
        # place is what keeps the local sandbox off the coordinator's repository.
        return LocalSandbox.start(host_workspace=workdir, limits=limits)


@dataclass(frozen=True)
class SandboxChoice:
    factory: Factory
    notice: str | None  # what the user must be told before the run starts (None: nothing)

    @property
    def kind(self) -> str:
        return self.factory.kind

    def describe(self) -> str:
        return f"docker ({self.factory.image})" if self.kind == "docker" else "local (no isolation)"


def docker_problem(image: str) -> str | None:
    """Why Docker cannot run ``image`` here, in a few words; None when it can."""
    import docker
    from docker.errors import ImageNotFound

    try:
        client = docker.from_env(timeout=10)
    except Exception as exc:
        return f"no Docker engine answers ({_first_line(exc)})"
    try:
        client.ping()
        client.images.get(image)
    except ImageNotFound:
        return f"the sandbox image {image} is missing; {BUILD_HINT.replace('IMAGE', image)}"
    except Exception as exc:
        return f"no Docker engine answers ({_first_line(exc)})"
    finally:
        client.close()
    return None


def choose_sandbox(kind: SandboxKind, image: str) -> SandboxChoice:
    """The sandbox an embedded run uses.

    Raises:
        SandboxStartError: ``docker`` was asked for and cannot run, or no sandbox at all can
            (no Docker, and no ``bash`` for the local one).
    """
    problem = None if kind == "local" else docker_problem(image)
    if problem is None and kind != "local":
        return SandboxChoice(Factory("docker", image), None)
    if kind == "docker":
        msg = f"the docker sandbox was asked for (RAAS_SANDBOX or --sandbox) but {problem}"
        raise SandboxStartError(msg)
    if shutil.which("bash") is None:
        why = f"{problem}, and " if problem else ""
        msg = f"no sandbox can run here: {why}the local sandbox needs bash on PATH"
        raise SandboxStartError(msg)
    if kind == "local":
        notice = f"Local sandbox asked for: {LOCAL_NOTICE}"
    elif problem is not None and problem.startswith("the sandbox image"):
        notice = f"Docker is here but {problem}. Meanwhile: {LOCAL_NOTICE}"
    else:
        notice = f"No Docker engine: {LOCAL_NOTICE}"
    return SandboxChoice(Factory("local", image), notice)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
