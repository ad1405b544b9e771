"""Forges that carry pull requests: one small interface (``base.Forge``), GitHub and GitLab over
their REST APIs. ``forge_for`` picks one from ``[delivery]`` and the remote's URL."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from orchestrator.delivery.forges.base import Forge, PullRequest
from orchestrator.delivery.forges.github import GitHub
from orchestrator.delivery.forges.gitlab import GitLab
from orchestrator.remotes.clone import parse_remote
from shared.errors import InvalidInput
from shared.project_config import DeliveryConfig

__all__ = ["Forge", "PullRequest", "forge_for", "repo_path"]


def repo_path(remote_url: str) -> str:
    """``owner/name`` (or ``group/sub/name``) of a remote URL, without ``.git``."""
    path = urlsplit(remote_url).path if "://" in remote_url else remote_url.split(":", 1)[1]
    return path.strip("/").removesuffix(".git")


def forge_for(
    config: DeliveryConfig, remote_url: str, token: str, transport: httpx.BaseTransport | None = None
) -> GitHub | GitLab:
    """The forge client for the remote.

    Raises:
        InvalidInput: the forge cannot be told from the host and ``[delivery] forge`` is not set.
    """
    host = parse_remote(remote_url).host.split(":", 1)[0]
    kind = config.forge or ("github" if host == "github.com" else "gitlab" if "gitlab" in host else None)
    if kind is None:
        msg = f'[delivery] forge is not set and {host} is not a known forge; set forge = "github" or "gitlab"'
        raise InvalidInput(msg)
    if kind == "github":
        api = config.api_url or (
            "https://api.github.com" if host == "github.com" else f"https://{host}/api/v3"
        )
        return GitHub(api, repo_path(remote_url), token, transport)
    return GitLab(config.api_url or f"https://{host}/api/v4", repo_path(remote_url), token, transport)
