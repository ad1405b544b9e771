"""The short chaos soak, run by the test command beside its main run: three minutes, six
projects, seed 339 (all six kinds of fault among its 9; a pr, a local, a budget, a pipeline, a
dialectic and an OpenCode project), a fault every 20 s on average, workspaces in the object
store (moto), two coordinator replicas behind HAProxy. It restarts only what it started (its
Postgres, Redis, dockerd); with RAAS_CHAOS_DOCKER=restart it restarts the machine's dockerd, and
must run alone. The long soak is ``bash scripts/chaos.sh --minutes M --projects N``."""

from __future__ import annotations

import os

import pytest

from tests.chaos.soak import SoakConfig, run

pytestmark = [pytest.mark.chaos]

# The soak's defaults: what `bash scripts/chaos.sh` with no option runs.
SHORT = SoakConfig(docker=os.environ.get("RAAS_CHAOS_DOCKER", SoakConfig.docker))


@pytest.mark.timeout(3600)  # about 8 min alone; a starved machine took 12
def test_a_short_soak_loses_duplicates_and_leaves_nothing() -> None:
    # Given six projects on a cluster of its own, When its pieces are broken at random for three
    # minutes, Then every check of the table holds
    result = run(SHORT, say=lambda line: print(line, flush=True))
    print(result.report())
    assert result.ok, result.report()
