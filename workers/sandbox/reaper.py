"""Removes sandbox containers whose iteration is no longer running (its worker died).

Every sandbox container carries ``raas.managed=true`` plus the caller's labels
(``raas.project``, ``raas.iteration``, ``raas.attempt``, ``raas.worker``); the caller's
``is_live`` decides from those labels whether the container still has an owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import docker
from docker.errors import APIError, NotFound

from workers.sandbox.container import MANAGED_LABEL

log = logging.getLogger(__name__)


def reap(client: docker.DockerClient, is_live: Callable[[dict[str, str]], bool]) -> list[str]:
    """Remove every managed container for which ``is_live(labels)`` is False; their names.

    A container whose ``is_live`` raises is kept: reaping a live iteration's sandbox is
    worse than keeping an orphan until the next pass.
    """
    removed: list[str] = []
    for summary in client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=true"}):
        labels: dict[str, str] = summary.get("Labels") or {}
        name = (summary.get("Names") or [summary["Id"][:12]])[0].lstrip("/")
        try:
            live = is_live(labels)
        except Exception:
            log.exception("cannot tell whether sandbox %s is live; keeping it", name)
            continue
        if live:
            continue
        try:
            client.api.remove_container(summary["Id"], force=True)
        except NotFound:
            continue
        except APIError as e:
            log.warning("could not reap sandbox %s: %s", name, e)
            continue
        log.info("reaped orphan sandbox %s (%s)", name, labels)
        removed.append(name)
    return removed
