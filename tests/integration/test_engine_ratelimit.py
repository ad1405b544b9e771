"""The cluster-wide rate limit is applied to every LLM call, and a worker that waits says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared import events
from shared.db import session_scope
from tests.support.engine import engine
from workers.llm.ratelimit import ProviderLimits, RateLimiter, key_fingerprint

pytestmark = [pytest.mark.integration, pytest.mark.docker]

THREE_CALLS = {
    "responses": [
        {"content": [{"type": "tool_use", "name": "bash", "input": {"command": "true"}}], "repeat": 2},
        {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "done"}}]},
    ]
}


def test_calls_past_the_provider_limit_wait_and_say_so(services: dict[str, str], tmp_path: Path) -> None:
    # Given a limit of 2 requests per 2-second window, shared through Redis
    limits = ProviderLimits(requests_per_minute=2, window_s=2)
    client = redis.Redis.from_url(services["redis_url"])
    fingerprint = key_fingerprint(f"test-key-{tmp_path.name}")
    with engine(THREE_CALLS, tmp_path) as eng:
        eng.limiter = RateLimiter(client, limits, fingerprint)
        # When an iteration makes three calls
        project_id = eng.submit()
        eng.run_next(project_id)
        # Then the third waited for the window, and the wait is in the project's events
        with session_scope() as session:
            waits = [e for e in events.history(session, project_id) if e.type == events.RATE_LIMIT_WAIT]
        assert waits
        assert waits[0].data["limit"] == "requests_per_minute"
        assert 0 < waits[0].data["wait_s"] <= 2
        assert len(eng.requests(project_id)) == 3
    client.close()
