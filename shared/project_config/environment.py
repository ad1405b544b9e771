"""``[environment]`` in raas.toml (or ``.raas/environment.toml`` in the workspace): the image, the
setup script, the files whose contents key the snapshot, environment variables and the network
level of setup and of iterations. A worker runs the setup once per key and starts every
iteration with that key from the snapshot (see :mod:`workers.environment`)."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import PurePosixPath

from pydantic import Field, field_validator, model_validator

from shared.project_config.tables import Strict

ENVIRONMENT_FILE = ".raas/environment.toml"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names the sandbox sets itself, and the proxy settings the network level decides.
_RESERVED_ENV = {"HOME", "TMPDIR", "PATH", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}
DEFAULT_REGISTRIES = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "deb.debian.org",
    "security.debian.org",
)


class NetworkLevel(str, Enum):
    """What a container of the environment may reach (docs/SECURITY.md says why each)."""

    NONE = "none"
    """Its own loopback only."""
    REGISTRIES = "registries"
    """The hosts of ``registries`` only, through the worker's allow-listing egress proxy."""
    FULL = "full"
    """Anything the worker host's Docker network reaches (needs the operator's consent)."""


def _inside_workspace(path: str, what: str = "key file") -> str:
    """``path`` if it names a file inside the workspace, else ValueError naming it."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path or "\x00" in path:
        msg = f"{what} {path!r} is outside the workspace; give a path relative to it, without '..'"
        raise ValueError(msg)
    return path


class EnvironmentConfig(Strict):
    """``[environment]``: how a project's iterations get their toolchain; none of it by default."""

    image: str | None = Field(
        default=None,
        max_length=300,
        description="Base image on the worker host (never pulled); the worker's sandbox image when not "
        "given. It needs python3 for the sandbox helper and the registries relay.",
    )
    dockerfile: str | None = Field(
        default=None,
        description="A Dockerfile in the workspace built on the worker host (no pulls, no network) as the "
        "base image instead of image; its contents are part of the snapshot's key.",
    )
    setup: str | None = Field(
        default=None,
        max_length=20_000,
        description="A bash script run once in /workspace (as uid 1000) to install what the project needs; "
        "its result is snapshotted. Build state goes in the directories of keep.",
    )
    setup_timeout_s: float = Field(default=900.0, gt=0, le=7200, description="The setup's time limit.")
    keep: list[str] = Field(
        default_factory=lambda: [".venv", "node_modules", "target"],
        description="Workspace directories (ignored build state) kept in the snapshot and put back, in "
        "place, under every iteration's fresh checkout (read-only there: change a key file to change them).",
    )
    key_files: list[str] = Field(
        default_factory=list,
        description="Files whose contents key the snapshot (lockfiles: requirements.txt, uv.lock, "
        "package-lock.json...): a change makes a new one. A file that is missing counts as empty.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of the setup and of every iteration."
    )
    setup_network: NetworkLevel = Field(
        default=NetworkLevel.REGISTRIES, description='Network of the setup: "none", "registries" or "full".'
    )
    network: NetworkLevel = Field(
        default=NetworkLevel.NONE, description='Network of the iterations: "none", "registries" or "full".'
    )
    registries: list[str] = Field(
        default_factory=lambda: list(DEFAULT_REGISTRIES),
        description='Hosts (optionally host:port) the "registries" level lets through the egress proxy.',
    )

    @field_validator("key_files", "keep")
    @classmethod
    def _files_inside(cls, paths: list[str]) -> list[str]:
        return [_inside_workspace(p) for p in paths]

    @field_validator("dockerfile")
    @classmethod
    def _dockerfile_inside(cls, path: str | None) -> str | None:
        return None if path is None else _inside_workspace(path, "dockerfile")

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name) or name in _RESERVED_ENV:
                msg = f"env: {name!r} is not a variable a project may set"
                raise ValueError(msg)
            if "\x00" in value:
                msg = f"env: {name} contains a NUL byte"
                raise ValueError(msg)
        return env

    @field_validator("registries")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d{1,5})?", host):
                msg = f"registries: {host!r} is not a host name (e.g. pypi.org or localhost:8080)"
                raise ValueError(msg)
        return [h.lower() for h in hosts]

    @model_validator(mode="after")
    def _one_base(self) -> EnvironmentConfig:
        if self.image and self.dockerfile:
            msg = "give image or dockerfile, not both"
            raise ValueError(msg)
        return self

    @property
    def active(self) -> bool:
        """Whether iterations need anything beyond the worker's plain sandbox."""
        base = bool(self.image or self.dockerfile or self.setup or self.env)
        return base or self.network != NetworkLevel.NONE
