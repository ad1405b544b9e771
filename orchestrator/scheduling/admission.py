"""Putting iterations on the queue: the breaker and the budget gate first, then fair admission.

A scheduled iteration is a row that waits until ``pump`` sends it: a project has at most
``max_parallel`` iterations queued or running (so one project's fifty subagents cannot fill the
queue in front of another project's loop), and at most one iteration of a non-parallel agent
(only those change the workspace, so their commits never race).
"""

from __future__ import annotations

from sqlalchemy import bindparam, select

from orchestrator.scheduling import approvals
from orchestrator.scheduling.breaker import Breaker, IterationReport, check_timeout, may_run, record
from orchestrator.scheduling.outbox import Outbox
from orchestrator.scheduling.transitions import pause, pause_for_breaker, pause_for_budget
from shared import budget
from shared.harnesses import HARNESSES
from shared.models import (
    Agent,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    unfinished,
    utcnow,
)
from shared.pricing import find_price
from shared.project_config import ProjectConfig


def schedule(
    out: Outbox, project: Project, config: ProjectConfig, agent_id: str, number: int, *, trial: bool = False
) -> bool:
    """Add an agent's next iteration if the breaker allows it (else pause), and pump.

    Returns whether the project still runs (the budget gate in ``pump`` may have paused it).

    ``trial`` is the half-open breaker's one iteration, already let through by ``may_run``.
    """
    if not trial and not _breaker_allows(out, project, config):
        return False
    out.new_iteration(project.id, agent_id, number)
    if not out.defer_pump:
        pump(out, project, config)
    return project.status == ProjectStatus.RUNNING


# A project's iterations queued or running, oldest first (bounded by what is in flight or waiting).
_UNFINISHED = (
    select(Iteration, Agent)
    .join(Agent, Agent.id == Iteration.agent_id)
    .where(
        Iteration.project_id == bindparam("project_id"),
        unfinished(),
    )
    .order_by(Iteration.created_at)
)


def pump(out: Outbox, project: Project, config: ProjectConfig) -> int:
    """Send waiting iterations to the workers within the project's limits; how many were sent.

    One query reads the project's unfinished iterations (bounded by what is in flight or
    waiting, never by its history); the ones this transaction added are not flushed for it.
    """
    with out.session.no_autoflush:
        rows = out.session.execute(_UNFINISHED, {"project_id": project.id}).all()
        # Oldest first; this transaction's own come last (dicts keep their order).
        candidates = {iteration: agent for iteration, agent in rows}
        for iteration in out.scheduled:
            if iteration.project_id == project.id and iteration not in candidates:
                candidates[iteration] = out.session.get_one(Agent, iteration.agent_id)
    in_flight = [agent for iteration, agent in candidates.items() if _in_flight(iteration)]
    active = len(in_flight)
    writer_busy = any(not agent.parallel for agent in in_flight)
    if config.approvals.spend_usd is not None:  # a person decides whether it spends more (issue #25)
        sending = any(i.status == IterationStatus.QUEUED and not _in_flight(i) for i in candidates)
        if approvals.spend_waits(out, project, config, sending=sending, active=active):
            return 0
    sent = 0
    for iteration, agent in candidates.items():
        if iteration.status != IterationStatus.QUEUED or _in_flight(iteration):
            continue
        if active >= config.max_parallel:
            break
        if not agent.parallel and writer_busy:
            continue
        if not _reserve_first_call(out, project, config, iteration, agent.category):
            if not active:
                pause_for_budget(out, project)  # nothing in flight will give money back
            break  # wait: the iterations in flight settle their reservations when they end
        out.enqueue(project.id, iteration)
        active, sent = active + 1, sent + 1
        writer_busy = writer_busy or not agent.parallel
    return sent


def _in_flight(iteration: Iteration) -> bool:
    """Running, or sent to the broker and not yet claimed."""
    return iteration.status == IterationStatus.RUNNING or iteration.enqueued_at is not None


def _reserve_first_call(
    out: Outbox, project: Project, config: ProjectConfig, iteration: Iteration, category: str
) -> bool:
    """The budget gate (DESIGN.md rule 1): hold the iteration's first call before it is sent, if
    what remains pays at least the smallest call of its model."""
    price = find_price(config.model_for(category), config.pricing)
    assert price is not None  # raas.toml validation refuses unpriced models
    estimate = budget.call_estimate_usd(price, budget.DEFAULT_INPUT_TOKENS, config.max_tokens)
    harness = HARNESSES.get(config.harness_for(category))
    first = harness.first_request_tokens if harness is not None else budget.DEFAULT_INPUT_TOKENS
    return budget.admit(out.session, project, iteration, estimate, budget.smallest_call_usd(price, first))


def _breaker_allows(out: Outbox, project: Project, config: ProjectConfig) -> bool:
    now = utcnow()
    state, trip = check_timeout(breaker_of(project), project.started_at or now, config.circuit_breaker, now)
    state, allowed = may_run(state, config.circuit_breaker, now)
    project.breaker = state.model_dump(mode="json")
    if trip is not None:
        pause_for_breaker(out, project, trip)
        return False
    if not allowed:
        pause(out, project, PauseReason.CIRCUIT_BREAKER, state.reason or "the circuit breaker is open")
    return allowed


def breaker_of(project: Project) -> Breaker:
    return Breaker.model_validate(project.breaker) if project.breaker else Breaker()


def breaker_trips(out: Outbox, project: Project, iteration: Iteration, config: ProjectConfig) -> bool:
    """Tell the breaker how an iteration went; True (and the project paused) if it opened."""
    report = IterationReport(
        failed=iteration.status == IterationStatus.FAILED,
        error=iteration.error,
        progress=bool(iteration.files_changed),
    )
    state, trip = record(breaker_of(project), report, config.circuit_breaker, utcnow())
    project.breaker = state.model_dump(mode="json")
    if trip is not None:
        pause_for_breaker(out, project, trip)
    return trip is not None
