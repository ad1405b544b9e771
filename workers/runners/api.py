"""The ``api`` harness's runner: the built-in loop (:class:`~workers.runners.builtin.AgentSession`)
over the process's model client, its tools in a plain sandbox (a warm one when the pool has one)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import Settings
from workers.claim import Claim
from workers.llm import client as llm
from workers.llm.ratelimit import RateLimiter
from workers.llm.retry import RetryPolicy
from workers.runners.base import Emit, Publish, RunResult, StartSandbox
from workers.runners.builtin import AgentSession


@dataclass
class ApiRunner:
    claim: Claim
    settings: Settings
    start_sandbox: StartSandbox
    emit: Emit
    publish: Publish
    limiter: RateLimiter | None = None

    def run(self) -> RunResult:
        client = llm.shared_client(self.settings)
        sandbox = self.start_sandbox(None)
        try:
            policy = RetryPolicy(budget_s=self.settings.llm_retry_budget_s)
            session = AgentSession(
                self.claim, sandbox, client, self.emit, policy, limiter=self.limiter, publish=self.publish
            )
            return session.run()
        finally:
            sandbox.close()
