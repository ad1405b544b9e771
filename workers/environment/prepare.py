"""A project's environment made ready for one iteration on this worker host.

:meth:`Environments.prepare` finds (or builds: the base from a Dockerfile, then the setup's
snapshot) the image whose key matches the workspace, puts the ``keep`` links under the fresh
checkout, and says what the iteration's container needs (:class:`Prepared`); the iteration
runner starts its sandbox with that and calls :meth:`Prepared.unlink` before committing. Builds of
one key are serialized across the threads and the processes of the host (a file lock), so a
key's setup runs once however many iterations ask for it at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import BuildError, DockerException, ImageNotFound

from shared.errors import InvalidInput
from shared.project_config.environment import ENVIRONMENT_FILE, EnvironmentConfig, NetworkLevel
from shared.project_config.parse import full_network_key, parse_environment_file
from shared.settings import get_settings
from workers.environment.proxy import EgressProxy
from workers.environment.snapshot import (
    STATE_ROOT,
    SetupFailed,
    build_snapshot,
    collect_snapshots,
    find_snapshot,
    pull_snapshot,
    push_snapshot,
    snapshot_key,
)
from workers.sandbox.container import SandboxMounts
from workers.sandbox.docker import engine_client

log = logging.getLogger(__name__)
SNAPSHOT_MAX_AGE_S = 7 * 24 * 3600.0
SNAPSHOT_MAX_BYTES = 20 * 1024**3


@dataclass
class Prepared:
    """What one iteration's container needs of the environment, and the links it put down."""

    mounts: SandboxMounts
    full_network: bool
    snapshot: str | None = None
    built: bool = False
    """Whether this call ran the setup (False: the snapshot was on this host or in the registry)."""
    pulled: str | None = None
    """The registry reference the snapshot was pulled from by this call (RAAS_SNAPSHOT_REGISTRY)."""
    links: list[Path] = field(default_factory=list)

    def unlink(self) -> None:
        """Take the ``keep`` links out of the workspace again, so they are never committed."""
        for link in self.links:
            if link.is_symlink():
                link.unlink()


def read_environment(config: EnvironmentConfig, workdir: Path) -> EnvironmentConfig:
    """raas.toml's ``[environment]``, or the workspace's ``.raas/environment.toml`` when raas.toml
    gives none.

    Raises:
        SetupFailed: the file is not valid (one line naming the key).
    """
    path = workdir / ENVIRONMENT_FILE
    if config.active or not path.is_file() or path.is_symlink():
        return config
    try:
        return parse_environment_file(path.read_text(encoding="utf-8"))
    except InvalidInput as exc:  # the file changed since the submission read it
        raise SetupFailed(str(exc)) from exc


class Environments:
    """The environments of one worker process: its egress proxies and its snapshot builds."""

    def __init__(
        self, state_dir: Path, default_image: str, allow_full_network: bool, registry: str | None = None
    ) -> None:
        """``registry``: where snapshots are pushed and pulled (``host:port/repository``); by default
        RAAS_SNAPSHOT_REGISTRY, and "" for none."""
        self.state_dir = state_dir
        self.registry = get_settings().snapshot_registry if registry is None else registry
        self.default_image = default_image
        self.allow_full_network = allow_full_network
        self._proxies: dict[tuple[str, ...], EgressProxy] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._sockets: Path | None = None  # short: a unix socket's path has at most 107 bytes

    def prepare(
        self, config: EnvironmentConfig, workdir: Path, labels: dict[str, str] | None = None
    ) -> Prepared:
        """Make the environment ready for an iteration on ``workdir`` (its fresh checkout);
        ``labels`` (the iteration's sandbox labels) go on the setup's container.

        Raises:
            SetupFailed: no such image, the Dockerfile or the setup failed (one line, or the
                setup's log tail); the project fails with it, before any model call.
        """
        config = read_environment(config, workdir)
        full = full_network_key(config)
        if full and not self.allow_full_network:
            msg = f'[environment] {full} = "full" but this cluster allows containers no network'
            msg += " (RAAS_SANDBOX_NETWORK_ALLOWED)"
            raise SetupFailed(msg)
        try:
            client = engine_client(timeout_s=int(config.setup_timeout_s) + 120)
        except DockerException as exc:
            msg = f"[environment] needs a Docker engine: {exc}"
            raise SetupFailed(msg) from exc
        try:
            return self._prepare(client, config, workdir, labels or {})
        finally:
            client.close()

    def _prepare(
        self, client: docker.DockerClient, config: EnvironmentConfig, workdir: Path, labels: dict[str, str]
    ) -> Prepared:
        base, base_id = self._base(client, config, workdir)
        proxy = self.proxy_dir(config.registries) if config.network is NetworkLevel.REGISTRIES else None
        mounts = SandboxMounts(image=base, env=tuple(config.env.items()), proxy_dir=proxy and str(proxy))
        prepared = Prepared(mounts, full_network=config.network is NetworkLevel.FULL)
        if not config.setup:
            return prepared
        key = snapshot_key(config, base_id, workdir)
        with self._building(key):
            tag = find_snapshot(client, key)
            if tag is None and self.registry:
                tag = pull_snapshot(client, self.registry, key)
                prepared.pulled = tag and f"{self.registry}:{key[:40]}"
            if tag is None:
                setup_proxy = config.setup_network is NetworkLevel.REGISTRIES
                tag = build_snapshot(
                    client,
                    config,
                    base,
                    key,
                    workdir,
                    self.proxy_dir(config.registries) if setup_proxy else None,
                    labels,
                )
                prepared.built = True
                if self.registry:
                    push_snapshot(client, self.registry, tag, key)
                collect_snapshots(client, SNAPSHOT_MAX_AGE_S, SNAPSHOT_MAX_BYTES, keep_tag=tag)
        prepared.snapshot = tag
        prepared.mounts = mounts.model_copy(update={"image": tag})
        for name in config.keep:
            link = workdir / name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(f"{STATE_ROOT}/{name}")
                prepared.links.append(link)
        return prepared

    def _base(self, client: docker.DockerClient, config: EnvironmentConfig, workdir: Path) -> tuple[str, str]:
        """The base image's name and id, built from the Dockerfile first if the project gives one."""
        if config.dockerfile is None:
            image = config.image or self.default_image
            try:
                return image, client.images.get(image).id
            except ImageNotFound as exc:
                msg = (
                    f"[environment] image {image!r} is not on this worker host and is never pulled: "
                    "load or build it there, or give [environment] dockerfile"
                )
                raise SetupFailed(msg) from exc
        dockerfile = workdir / config.dockerfile
        if not dockerfile.is_file() or workdir.resolve() not in dockerfile.resolve().parents:
            msg = f"[environment] dockerfile {config.dockerfile!r} is not a file in the workspace"
            raise SetupFailed(msg)
        context = dockerfile.parent
        digest = hashlib.sha256()
        for path in sorted(p for p in context.rglob("*") if p.is_file() and not p.is_symlink()):
            digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
        tag = f"raas-env-base:{digest.hexdigest()[:40]}"
        try:
            return tag, client.images.get(tag).id
        except ImageNotFound:
            try:
                client.images.build(
                    path=str(context),
                    dockerfile=dockerfile.name,
                    tag=tag,
                    pull=False,
                    network_mode="none",
                    rm=True,
                )
            except BuildError as exc:
                lines = [str(c.get("stream") or c.get("error") or "").strip() for c in exc.build_log]
                last = next((line for line in reversed(lines) if line), str(exc))
                msg = f"[environment] dockerfile {config.dockerfile!r} did not build: {last}"
                raise SetupFailed(msg) from exc
        return tag, client.images.get(tag).id

    @contextmanager
    def _building(self, key: str) -> Iterator[None]:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        path = self.state_dir / "locks" / f"{key[:40]}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with lock, path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def proxy_dir(self, registries: list[str]) -> Path:
        """The directory of the egress proxy for this allow-list (started on first use)."""
        allowed = tuple(sorted(registries))
        with self._lock:
            proxy = self._proxies.get(allowed)
            if proxy is None:
                if self._sockets is None:
                    self._sockets = Path(tempfile.mkdtemp(prefix="raas-egress-"))
                    self._sockets.chmod(0o755)  # the sandbox user reaches the socket through it
                name = hashlib.sha256("\n".join(allowed).encode()).hexdigest()[:16]
                proxy = EgressProxy(self._sockets / name / "proxy.sock", list(allowed))
                proxy.socket_path.parent.chmod(0o755)
                self._proxies[allowed] = proxy
        return proxy.socket_path.parent

    def proxy_for(self, registries: list[str]) -> EgressProxy:
        """The running proxy of this allow-list (what tests read its ``asked`` from)."""
        self.proxy_dir(registries)
        return self._proxies[tuple(sorted(registries))]

    def close(self) -> None:
        with self._lock:
            proxies, self._proxies = list(self._proxies.values()), {}
        for proxy in proxies:
            proxy.close()
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
