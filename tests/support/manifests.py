"""The Kubernetes manifests in deploy/kubernetes/, as the kustomization applies them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

K8S_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def documents(name: str) -> list[dict[str, Any]]:
    """The objects of one file of deploy/kubernetes/."""
    with (K8S_DIR / name).open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def kustomization() -> dict[str, Any]:
    return documents("kustomization.yaml")[0]


def objects() -> list[dict[str, Any]]:
    """Every object the kustomization applies."""
    return [doc for name in kustomization()["resources"] for doc in documents(name)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects() if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def keda_triggers() -> dict[str, dict[str, Any]]:
    """The workers' ScaledObject's triggers by type (redis, prometheus)."""
    return {t["type"]: t for t in one("ScaledObject")["spec"]["triggers"]}
