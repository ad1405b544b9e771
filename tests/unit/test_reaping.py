"""Which sandboxes a worker's sweep may remove, decided from their labels."""

from __future__ import annotations

import pytest

from workers.sandbox.pool import POOL_LABEL
from workers.sandbox.sweeper import is_live

pytestmark = pytest.mark.unit


def test_a_warm_pools_sandbox_lives_as_long_as_its_worker_answers() -> None:
    labels = {"raas.cluster": "c1", POOL_LABEL: "raas-pool-ab", "raas.worker": "w0@host"}
    assert is_live(labels, "c1", live_workers={"w0@host", "w1@host"})
    assert not is_live(labels, "c1", live_workers={"w1@host"})
    assert is_live(labels, "c1", live_workers=None)  # the broker could not say: keep it


def test_another_clusters_sandbox_is_never_ours_to_remove() -> None:
    labels = {"raas.cluster": "c2", POOL_LABEL: "raas-pool-ab", "raas.worker": "w0@host"}
    assert is_live(labels, "c1", live_workers=set())
    assert is_live({"raas.cluster": "c2", "raas.iteration": "i", "raas.attempt": "1"}, "c1")


def test_a_sandbox_without_an_owner_label_is_left_alone() -> None:
    assert is_live({"raas.cluster": "c1"}, "c1", live_workers=set())
