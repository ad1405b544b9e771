"""The model answering 529 (overloaded) for about 30 seconds in the middle of a project: the
worker backs off and retries (each wait said in an ``llm_retry`` event), nothing is charged for the
refused calls, and the project completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import pytest

from tests.support.faults import Rig, ralph_script, verify

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
# Four 529s, each after 5 s (a slow refusal, as under real overload), with the worker's backoff
# (1 s base, doubling, jittered) between them: about 30 s from the first 529 to the answer.
REFUSALS = 4
REFUSAL_LATENCY_S = 5.0
OVERLOADED = {
    "error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"},
    "repeat": REFUSALS,
    "latency_s": REFUSAL_LATENCY_S,
}


@pytest.mark.timeout(240)
def test_model_overloaded_for_30s_mid_project_is_ridden_out_and_the_project_completes(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given a project of five iterations whose model is overloaded when iteration 3 begins
    rig = make_rig(ralph_script(5, before={3: [OVERLOADED]}), database_url=database_url, workers=1)
    submitted_at = time.monotonic()
    project_id = rig.submit()
    follower = rig.follow(project_id)

    # When it runs through the overload
    verdict = verify(rig, project_id, follower, submitted_at)

    # Then every 529 was retried, and the overload lasted about 30 s of wall time
    requests = [r for r in rig.stack.model_requests() if r["session"] == project_id]
    refused = [i for i, r in enumerate(requests) if "error" in rig.script["responses"][r["step"]]]
    assert len(refused) == REFUSALS
    first = datetime.fromisoformat(requests[refused[0]]["time"])
    answered = datetime.fromisoformat(requests[refused[-1] + 1]["time"])
    overload_s = (answered - first).total_seconds()
    assert overload_s >= 25, overload_s
    assert verdict.retries == REFUSALS
    print(
        "\n"
        + verdict.summary(
            f"the model answered HTTP 529 overloaded_error (each after {REFUSAL_LATENCY_S:.0f}s) to "
            f"the first {REFUSALS} calls of iteration 3, {overload_s:.0f}s from the first "
            f"refusal to the call that was answered; the worker retried with backoff, one llm_retry event "
            f"per refusal ({verdict.retries}), and no refused call was stored or charged."
        )
    )
