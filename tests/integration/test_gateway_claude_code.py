"""The real Claude Code binary, on the host, calling the model through a gateway lease the way it
does in a container (``ANTHROPIC_UNIX_SOCKET`` + ``ANTHROPIC_BASE_URL=http://localhost``, the
lease token as its key): its call is metered from the stream, and a spent budget's refusal is
one that it does not retry.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import update

from shared import budget
from shared.db import session_scope
from shared.models import Project
from tests.support.claude_host import CLAUDE, CLAUDE_MISSING, run_claude_on_host
from tests.support.engine import Engine, engine
from tests.support.records import messages, text
from workers.claim import Claim, claim_iteration
from workers.gateway import Gateway, GatewayLease

pytestmark = [pytest.mark.integration]

USAGE = {
    "input_tokens": 1234,
    "output_tokens": 56,
    "cache_creation_input_tokens": 100,
    "cache_read_input_tokens": 200,
}
SCRIPT = {"responses": [text("All done.", usage=USAGE)], "when_exhausted": "repeat_last"}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    if not CLAUDE.exists():
        pytest.fail(CLAUDE_MISSING)
    with engine(SCRIPT, tmp_path) as running:
        yield running


@pytest.fixture
def gateway(eng: Engine) -> Iterator[Gateway]:
    settings = eng.settings.model_copy(
        update={"anthropic_api_key": SecretStr("sk-ant-real-key-of-the-worker")}
    )
    made = Gateway(settings, limiter=None, publish=None)
    yield made
    made.close()


def run_claude(lease: GatewayLease, home: Path) -> subprocess.CompletedProcess[str]:
    return run_claude_on_host(lease, home, "Say you are done.", max_turns=2)


def claimed(eng: Engine) -> tuple[str, Claim]:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim = claim_iteration(iteration_id, "gateway-test", stale_after_s=30)
    assert claim is not None
    return project_id, claim


def test_claude_code_completes_a_call_through_the_gateway_and_it_is_metered_from_the_stream(
    eng: Engine, gateway: Gateway, tmp_path: Path
) -> None:
    # Given a lease for a claimed iteration
    project_id, claim = claimed(eng)
    with gateway.open(claim, lambda event: None) as lease:
        # When Claude Code runs one turn through it
        done = run_claude(lease, tmp_path / "home")
        stats = lease.stats()

    # Then it completed, and the one call is recorded with exactly the usage the model sent
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert result["is_error"] is False
    assert "All done." in result["result"]
    replies = [row for row in messages(project_id) if row.role == "assistant"]
    assert len(replies) == 1
    reply = replies[0]
    recorded = (
        reply.input_tokens,
        reply.output_tokens,
        reply.cache_creation_input_tokens,
        reply.cache_read_input_tokens,
    )
    assert recorded == tuple(USAGE.values())
    assert stats.calls == 1
    assert stats.cost_usd == reply.cost_usd > 0


def test_claude_code_does_not_retry_the_refusal_of_a_spent_budget(
    eng: Engine, gateway: Gateway, tmp_path: Path
) -> None:
    # Given an iteration whose project has spent its budget (nothing held for it any more)
    project_id, claim = claimed(eng)
    with session_scope() as session:
        budget.release(session, project_id, claim.iteration_id)
        session.execute(
            update(Project).where(Project.id == project_id).values(spent_usd=Project.budget_limit_usd)
        )
    with gateway.open(claim, lambda event: None) as lease:
        # When Claude Code calls the model
        done = run_claude(lease, tmp_path / "home")
        stats = lease.stats()

    # Then the refusal ends its run at once: asked once, never sent upstream, the lease says why
    # (a 400 invalid_request_error is re-sent six times by Claude Code 2.1.330; a 402 billing_error once)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode != 0
    assert (result["is_error"], result["api_error_status"]) == (True, 402)
    assert '"api_retry"' not in done.stdout
    assert stats.refused == 1
    assert stats.budget_exhausted
    # (only the provider's free count of its input, which showed that not even a floor-sized
    # answer fits, went upstream)
    assert [r.path for r in eng.requests(project_id)] == ["/v1/messages/count_tokens"]
    assert "budget" in done.stdout
