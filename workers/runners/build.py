"""Each harness's runner, built by its typed name in one table (:data:`RUNNERS`); and the
validator's check, which runs no harness.

The iteration runner asks :func:`recipe_for` what runs a claim (before it leases a sandbox: a
warm one from the pool serves only a runner that needs a plain sandbox) and builds it with what
the iteration lends it (:class:`Lent`). A unit test builds a runner for every
:data:`~shared.harnesses.HarnessName`, so a new name cannot ship without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.categories import Role
from shared.harnesses import HarnessName
from shared.settings import Settings
from workers.claim import Claim
from workers.llm.ratelimit import RateLimiter
from workers.runners.api import ApiRunner
from workers.runners.base import Emit, Publish, Runner, StartSandbox
from workers.runners.check import CheckRunner
from workers.runners.cli import claude_code, codex, opencode
from workers.runners.cli.base import Cli
from workers.runners.cli.runner import CliRunner, OpenLease


@dataclass(frozen=True)
class Lent:
    """What an iteration lends the runner it builds; each runner takes what it needs."""

    settings: Settings
    workdir: Path
    start_sandbox: StartSandbox
    emit: Emit
    publish: Publish
    #: The iteration's hold on the LLM gateway (agent CLIs only: their model calls go through it).
    open_lease: OpenLease
    limiter: RateLimiter | None = None


@dataclass(frozen=True)
class Recipe:
    """How one kind of runner is built, and whether a warm sandbox from the pool can serve it
    (a plain one; an agent CLI's container is made with its mounts)."""

    build: Callable[[Claim, Lent], Runner]
    warm_sandbox: bool


def _api(claim: Claim, lent: Lent) -> Runner:
    return ApiRunner(claim, lent.settings, lent.start_sandbox, lent.emit, lent.publish, lent.limiter)


def _cli(cli: Cli) -> Recipe:
    def build(claim: Claim, lent: Lent) -> Runner:
        return CliRunner(
            claim,
            cli,
            workdir=lent.workdir,
            cache=lent.settings.harness_cache,
            start_sandbox=lent.start_sandbox,
            open_lease=lent.open_lease,
            emit=lent.emit,
            timeout_s=lent.settings.harness_timeout_s,
            on_host=lent.settings.harness_on_host,
        )

    return Recipe(build, warm_sandbox=False)


def _check(claim: Claim, lent: Lent) -> Runner:
    return CheckRunner(claim.config.check_command or "", lent.start_sandbox, lent.emit)


RUNNERS: dict[HarnessName, Recipe] = {
    "api": Recipe(_api, warm_sandbox=True),
    **{cli.name: _cli(cli) for cli in (claude_code.CLI, codex.CLI, opencode.CLI)},
}
#: The validator's gate: the project's check command, no model.
CHECK = Recipe(_check, warm_sandbox=True)


def recipe_for(claim: Claim) -> Recipe:
    """What runs ``claim``'s agent: a validator's check command when the project has one, else
    the harness of its category."""
    if claim.role is Role.VALIDATOR and claim.config.check_command:
        return CHECK
    return RUNNERS[claim.config.harness_for(claim.category)]


def build_runner(claim: Claim, lent: Lent) -> Runner:
    """``claim``'s runner, ready to run (nothing is started before its ``run``)."""
    return recipe_for(claim).build(claim, lent)
