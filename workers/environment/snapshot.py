"""Running a project's setup once and keeping the result as an image: the snapshot.

The setup runs in a container from the base image with a copy of the workspace *in its own
layer* at ``/workspace`` (not the bind mount iterations get: ``docker commit`` keeps the
writable layer only, never a bind mount, a volume or the ``/tmp`` tmpfs). Each directory of
``keep`` (``.venv``, ``node_modules``...) is a link from the workspace to
:data:`STATE_ROOT` in that layer, so what the setup builds there (with its absolute paths:
``/workspace/.venv/bin/python``) is committed, and every later iteration finds it behind the
same links under its fresh checkout. The snapshot is labelled with its key: the base image's
id, the setup script, ``keep``, ``env`` and the key files' hashes. With an operator's registry
(RAAS_SNAPSHOT_REGISTRY) a snapshot built here is pushed, and one missing here is pulled first.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from shared.project_config.environment import EnvironmentConfig, NetworkLevel
from workers.sandbox.base import SandboxLimits
from workers.sandbox.container import (
    MANAGED_LABEL,
    SANDBOX_ENV,
    SANDBOX_GID,
    SANDBOX_UID,
    WORKSPACE,
    host_config,
)
from workers.sandbox.relay import PROXY_DIR, PROXY_ENV, start_relay

log = logging.getLogger(__name__)
STATE_ROOT = "/opt/raas-state"
SNAPSHOT_REPO = "raas-env"
KEY_LABEL = "raas.environment.key"
SETUP_LABEL = "raas.environment.setup"
LOG_TAIL_LINES = 20


class SetupFailed(Exception):
    """The environment could not be made (a control-flow signal: the project fails with it)."""


def snapshot_key(config: EnvironmentConfig, base_id: str, workdir: Path) -> str:
    """The key of the snapshot for ``config`` on the base image ``base_id`` and this workspace."""
    files = {}
    for name in config.key_files:
        path = workdir / name
        root = workdir.resolve()
        if path.is_symlink() and root not in path.resolve().parents:
            msg = f"[environment] key file {name!r} is a link out of the workspace"
            raise SetupFailed(msg)
        files[name] = hashlib.sha256(path.read_bytes() if path.is_file() else b"").hexdigest()
    parts = {
        "base": base_id,
        "setup": config.setup or "",
        "keep": config.keep,
        "env": config.env,
        "files": files,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def find_snapshot(client: docker.DockerClient, key: str) -> str | None:
    """The tag of the snapshot with ``key`` on this host, if there is one."""
    tag = f"{SNAPSHOT_REPO}:{key[:40]}"
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    return tag if image.labels.get(KEY_LABEL) == key else None


def push_snapshot(client: docker.DockerClient, registry: str, tag: str, key: str) -> str | None:
    """Push the snapshot ``tag`` to ``registry`` as ``registry:<key>``; that reference, or None when
    the registry failed (logged: the snapshot is still this host's). Two hosts building one key push
    one tag: the last push wins, and both are the same setup's result."""
    remote = f"{registry}:{key[:40]}"
    try:
        client.api.tag(tag, registry, key[:40])
        try:
            _follow(client.api.push(registry, tag=key[:40], stream=True, decode=True))
        finally:
            client.api.remove_image(remote)  # only the name: the image stays under ``tag``
    except (APIError, DockerException, OSError, RegistryFailed) as exc:
        log.warning("environment snapshot %s not pushed to %s (kept here): %s", tag, registry, exc)
        return None
    log.info("environment snapshot %s pushed as %s", tag, remote)
    return remote


def pull_snapshot(client: docker.DockerClient, registry: str, key: str) -> str | None:
    """The snapshot with ``key`` pulled from ``registry`` and tagged as this host's own; None when the
    registry has none, or fails (logged: the caller builds it here)."""
    remote = f"{registry}:{key[:40]}"
    try:
        _follow(client.api.pull(registry, tag=key[:40], stream=True, decode=True))
    except NotFound:
        log.info("environment snapshot %s is not in the registry: building it here", remote)
        return None
    except (APIError, DockerException, OSError, RegistryFailed) as exc:
        log.warning("environment snapshot %s not pulled (the setup runs here instead): %s", remote, exc)
        return None
    try:
        image = client.images.get(remote)
        if image.labels.get(KEY_LABEL) != key:
            log.warning("environment snapshot %s in the registry is not of key %s: ignored", remote, key)
            return None
        tag = f"{SNAPSHOT_REPO}:{key[:40]}"
        client.api.tag(remote, SNAPSHOT_REPO, key[:40])
    except (APIError, DockerException, OSError) as exc:
        log.warning("environment snapshot %s pulled but unusable (the setup runs here): %s", remote, exc)
        return None
    finally:
        try:
            client.api.remove_image(remote)  # one name per snapshot: collect_snapshots removes it by id
        except (APIError, DockerException, OSError) as exc:
            log.info("environment snapshot %s: its registry name stays: %s", remote, exc)
    log.info("environment snapshot %s pulled from %s (the setup did not run here)", tag, registry)
    return tag


class RegistryFailed(Exception):
    """A push or a pull said it failed in its progress stream (the engine answers 200 for those).

    A control-flow signal (shared/errors.py): caught in this module, where a failing registry is
    logged and the setup runs here."""


def _follow(progress: Iterator[dict[str, object]]) -> None:
    for line in progress:
        if line.get("error"):
            raise RegistryFailed(str(line["error"]))


def build_snapshot(
    client: docker.DockerClient,
    config: EnvironmentConfig,
    base: str,
    key: str,
    workdir: Path,
    proxy_dir: Path | None,
    labels: dict[str, str],
) -> str:
    """Run the setup in a container of ``base`` with ``workdir`` copied in; commit it; its tag.

    ``labels`` are the iteration's (cluster, iteration, attempt...): the sweep removes the setup's
    container as it does a sandbox's when the worker running it dies.

    Raises:
        SetupFailed: the setup exited non-zero or timed out (its log tail in the message).
    """
    limits = SandboxLimits(
        memory="4g", cpus=2.0, pids=1024, network=config.setup_network is NetworkLevel.FULL
    )
    hc = host_config(client, workdir, limits)
    hc.update({"ReadonlyRootfs": False, "Binds": [f"{proxy_dir}:{PROXY_DIR}:ro"] if proxy_dir else []})
    env = {**config.env, **SANDBOX_ENV, **(PROXY_ENV if proxy_dir else {})}
    container = client.api.create_container(
        base,
        command=["sleep", "infinity"],
        user=f"{SANDBOX_UID}:{SANDBOX_GID}",
        working_dir=WORKSPACE,
        environment=env,
        labels={**labels, MANAGED_LABEL: "true", SETUP_LABEL: key},
        hostname="sandbox",
        host_config=hc,
    )["Id"]
    try:
        client.api.put_archive(container, "/", _workspace_tar(workdir, config.keep))
        client.api.start(container)
        if proxy_dir is not None:
            start_relay(client.api, container, f"{SANDBOX_UID}:{SANDBOX_GID}")
        code, output = _run_setup(client, container, config)
        if code != 0:
            tail = "\n".join(output.splitlines()[-LOG_TAIL_LINES:])
            why = "timed out" if code in (124, 137) else f"exited {code}"
            msg = f"[environment] setup {why}; its last lines:\n{tail}"
            raise SetupFailed(msg)
        tag = f"{SNAPSHOT_REPO}:{key[:40]}"
        labels = {MANAGED_LABEL: "true", KEY_LABEL: key, "raas.environment.created": str(int(time.time()))}
        client.api.commit(container, repository=SNAPSHOT_REPO, tag=key[:40], conf={"Labels": labels})
        log.info("environment snapshot %s made (setup ran once, %d bytes of log)", tag, len(output))
        return tag
    finally:
        try:
            client.api.remove_container(container, force=True)
        except (APIError, DockerException, OSError) as exc:  # labelled: the sweep removes it
            log.warning("could not remove setup container %s: %s", container[:12], exc)


def _run_setup(client: docker.DockerClient, container: str, config: EnvironmentConfig) -> tuple[int, str]:
    script = config.setup or "true"
    argv = ["timeout", "-s", "KILL", f"{config.setup_timeout_s:g}", "bash", "-c", script]
    exec_id = client.api.exec_create(container, argv, workdir=WORKSPACE)["Id"]
    # Not streamed: the client's timeout outlasts the setup's own (Environments.prepare), and a
    # streamed exec leaves its connection to the engine open after its end.
    output = client.api.exec_start(exec_id)
    code = client.api.exec_inspect(exec_id)["ExitCode"]
    return int(code if code is not None else 1), bytes(output).decode(errors="replace")


def _workspace_tar(workdir: Path, keep: list[str]) -> bytes:
    """``workdir`` as ``workspace/...`` owned by the sandbox user, each ``keep`` entry a link to its
    directory under STATE_ROOT (made, empty and writable)."""
    buffer = io.BytesIO()

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        return info.replace(uid=SANDBOX_UID, gid=SANDBOX_GID, uname="", gname="", deep=False)

    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(workdir), arcname=WORKSPACE.strip("/"), filter=owned)
        for directory in [STATE_ROOT, *(f"{STATE_ROOT}/{name}" for name in keep)]:
            info = owned(tarfile.TarInfo(directory.strip("/")))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in keep:
            if (workdir / name).exists() or (workdir / name).is_symlink():
                continue  # the project's own: left as it is
            link = owned(tarfile.TarInfo(f"{WORKSPACE.strip('/')}/{name}"))
            link.type, link.linkname = tarfile.SYMTYPE, f"{STATE_ROOT}/{name}"
            tar.addfile(link)
    return buffer.getvalue()


def collect_snapshots(
    client: docker.DockerClient, max_age_s: float, max_bytes: int, keep_tag: str, labels: tuple[str, ...] = ()
) -> int:
    """Remove snapshots older than ``max_age_s``, then the oldest while they take more than
    ``max_bytes`` (never ``keep_tag``, nor one a container still uses); how many went.

    ``labels`` narrows the snapshots looked at to those that also carry these.
    """
    # The summaries of the list call, not client.images.list(), which inspects each image in turn:
    # one another worker on the host removed in between failed this worker's preparation.
    images = client.api.images(filters={"label": [KEY_LABEL, *labels]})

    def created(image: dict[str, Any]) -> int:
        return int((image.get("Labels") or {}).get("raas.environment.created", "0"))

    dated = sorted(images, key=created)
    total = sum(int(image.get("Size") or 0) for image in dated)
    removed = 0
    now = time.time()
    for image in dated:
        old = now - created(image) > max_age_s
        if keep_tag in (image.get("RepoTags") or []) or not (old or total > max_bytes):
            continue
        try:
            client.images.remove(image["Id"], force=False)
        except (APIError, NotFound) as exc:
            log.info("environment snapshot %s kept: %s", image["Id"][:19], exc)
            continue
        total -= int(image.get("Size") or 0)
        removed += 1
    return removed
