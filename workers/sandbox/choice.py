"""Choosing where an embedded run's tools execute: Docker when it can, the local sandbox otherwise.

A distributed worker always uses Docker. An embedded run (``raas run``) may be on a laptop with
no Docker engine; it then falls back to
:class:`~workers.sandbox.local.LocalSandbox` and says so, because that sandbox isolates nothing
but the file tools. ``RAAS_SANDBOX`` (or ``raas run --sandbox``) forces one kind: ``docker``
refuses to run without a Docker engine and its image, ``local`` never looks for Docker. Either
way the sandbox is started by :func:`workers.sandbox.factory.start_sandbox` from the config chosen
here.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Literal

from shared.errors import SandboxStartError
from workers.sandbox.factory import (
    DockerSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
    SandboxFactory,
    factory_for,
)

SandboxKind = Literal["auto", "docker", "local"]
BUILD_HINT = "build it with deploy/sandbox/build-offline.sh (or docker build -t IMAGE deploy/sandbox)"
LOCAL_NOTICE = (
    "running tools in a local sandbox (a private copy of the workspace; no network or memory isolation)"
)


@dataclass(frozen=True)
class SandboxChoice:
    config: SandboxConfig
    notice: str | None  # what the user must be told before the run starts (None: nothing)

    @property
    def kind(self) -> str:
        return self.config.type

    @property
    def factory(self) -> SandboxFactory:
        return factory_for(self.config)

    def describe(self) -> str:
        if isinstance(self.config, DockerSandboxConfig):
            return f"docker ({self.config.image})"
        return "local (no isolation)"


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
        return SandboxChoice(DockerSandboxConfig(image=image), None)
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
    return SandboxChoice(LocalSandboxConfig(), notice)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
