"""Running one claimed iteration end to end: workspace in, sandbox up, session, commit back.

Whatever goes wrong inside, the iteration is recorded as failed with the reason and the
coordinator is told; an exception never escapes to kill the worker.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared import events
from shared.categories import Role
from shared.errors import InvalidInput
from shared.event_payloads import ToolExecuted
from shared.events import EventBus, EventData
from shared.git import commit_all, ignore_by_default
from shared.models import ErrorKind
from shared.scud import write_back
from shared.settings import Settings
from workers import records
from workers.agent.session import AgentSession, Emit, SessionFailure, SessionResult
from workers.gateway.server import Gateway
from workers.harness.session import HarnessSession, LlmLease, OpenLease
from workers.llm import client as llm
from workers.llm.ratelimit import RateLimiter
from workers.records import Claim, Outcome
from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.container import SandboxMounts
from workers.sandbox.factory import DockerSandboxConfig, SandboxFactory, factory_for
from workers.sandbox.pool import SandboxPool
from workers.sandbox.sweeper import cluster_id
from workers.workspace_transfer import WorkspaceTransfer

log = logging.getLogger(__name__)
CHECK_OUTPUT_CHARS = 8000


class Heartbeats:
    """Beats on the rows of every iteration this process runs, so the reconcile loop knows they
    live: one thread and one statement per interval for all of them.

    A threads worker runs a hundred iterations at once; a thread and a transaction each per
    interval were a tenth of its Python time. Each row is still beaten; only the writing is
    shared. The thread starts with the first iteration (in a prefork child, after the fork).
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._running: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def beating(self, claim: Claim) -> Iterator[None]:
        key = (claim.iteration_id, claim.attempt)
        with self._lock:
            self._running.add(key)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._running.discard(key)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                running = sorted(self._running)
            if not running:
                continue
            try:
                records.beat(running)
            except Exception:
                log.warning("heartbeat of %d iterations failed", len(running), exc_info=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def sandbox_labels(claim: Claim, worker: str, cluster: str) -> dict[str, str]:
    return {
        "raas.cluster": cluster,
        "raas.project": claim.project_id,
        "raas.iteration": claim.iteration_id,
        "raas.attempt": str(claim.attempt),
        "raas.worker": worker,
    }


def finishes_task(claim: Claim) -> bool:
    """Whether this agent completing means its task is done (the validator decides in a pipeline)."""
    if claim.depth > 0 or claim.role is Role.PLANNER:
        return False
    if claim.config.workflow == "pipeline":
        return claim.role is Role.VALIDATOR
    return True


def record_scud_status(claim: Claim, workdir: Path) -> None:
    """Mark the task done in the user's SCUD file, as part of this iteration's commit.

    The file is in the agent's reach: a symlink (or a path leading out) is refused rather than
    written through, since this runs on the host.
    """
    relative = claim.config.scud_file
    if not relative or not claim.task_key:
        return
    target = workdir / relative
    root = workdir.resolve()
    if target.is_symlink() or not target.is_file() or root not in target.resolve().parents:
        log.warning("not writing SCUD status: %s is not a plain file in the workspace", relative)
        return
    try:
        write_back(target, {claim.task_key: "D"})
    except InvalidInput:
        log.warning("not writing SCUD status of %s: the file no longer parses", claim.task_key, exc_info=True)


@dataclass
class Lease:
    """What an iteration holds while it runs; ``release`` gives every part of it back."""

    workdir: Path
    gitdir: Path
    base_sha: str
    sandbox: Sandbox | None = None

    def take_sandbox(self) -> Sandbox | None:
        sandbox, self.sandbox = self.sandbox, None
        return sandbox

    def release(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.gitdir, ignore_errors=True)


class IterationRunner:
    """Runs claimed iterations, any number at once (one per thread of a threads worker).

    What it holds is shared by those threads and safe for them: the bus and the limiter (Redis
    clients with connection pools) and the warm pool (locked). The model client is the process's
    (``llm.shared_client``); a sandbox has a Docker client of its own.
    """

    def __init__(
        self,
        settings: Settings,
        bus: EventBus,
        worker_name: str,
        sandbox_factory: SandboxFactory | None = None,
        limiter: RateLimiter | None = None,
        pool: SandboxPool | None = None,
        open_lease: OpenLease | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.worker_name = worker_name
        # None: every iteration in a container of its own from the sandbox image.
        self.start_sandbox = sandbox_factory or factory_for(DockerSandboxConfig(image=settings.sandbox_image))
        self.limiter = limiter
        self.pool = pool
        # A harness iteration's LLM gateway lease (None: the worker's gateway).
        self.open_lease = open_lease
        self._gateway: Gateway | None = None  # made by the first harness iteration
        self._gateway_lock = threading.Lock()
        self.heartbeats = Heartbeats(settings.heartbeat_interval_s)

    def _emitter(self, claim: Claim) -> Emit:
        def emit(payload: EventData) -> None:
            events.emit(
                self.bus, claim.project_id, payload, agent_id=claim.agent_id, iteration_id=claim.iteration_id
            )

        return emit

    def run(
        self, iteration_id: str, celery_task_id: str | None = None, report: Callable[[], None] | None = None
    ) -> Claim | None:
        """Run the iteration if this worker can claim it; return the claim (None if not ours).

        ``report`` (asking the coordinator to advance) is called once the end is recorded and
        before its event is published: the next iteration waits on the report, not on the event.
        The iteration's scratch directories are removed after both, for the same reason.
        """
        claim = records.claim(
            iteration_id, self.worker_name, self.settings.heartbeat_stale_s, celery_task_id, self.bus.publish
        )
        if claim is None:
            log.info("iteration %s is not claimable (done, or running elsewhere)", iteration_id)
            return None
        held: list[Lease] = []
        try:
            with self.heartbeats.beating(claim):
                outcome = self._execute(claim, self._emitter(claim), held)
            ended = records.finish(claim, outcome)
            if ended is None:
                log.warning(
                    "iteration %s attempt %d was taken over; its result is dropped",
                    iteration_id,
                    claim.attempt,
                )
                return None
            if report is not None:
                report()
            self.bus.publish(ended)
        finally:
            for lease in held:
                lease.release()
        return claim

    def _execute(self, claim: Claim, emit: Emit, held: list[Lease]) -> Outcome:
        """Run the claimed iteration; what it leased is left in ``held`` for the caller to release."""
        transfer = WorkspaceTransfer(
            self.settings.coordinator_url, self.settings.api_token.get_secret_value()
        )
        outcome = Outcome()
        lease: Lease | None = None
        try:
            lease = self._lease(claim, transfer)
            outcome.base_sha = outcome.commit_sha = lease.base_sha
            try:
                result = self._session(claim, lease, emit)
                outcome.completed_task, outcome.summary = result.completed, result.summary
            except SessionFailure as failure:
                outcome.error, outcome.error_kind = str(failure), failure.kind
            if claim.parallel:
                return outcome  # a parallel agent's copy is thrown away; its report is what counts
            if outcome.completed_task and finishes_task(claim):
                record_scud_status(claim, lease.workdir)
            # Work done before a failure is kept: the next iteration starts from it.
            ignore_by_default(lease.workdir, lease.gitdir, claim.config.default_ignore)
            commit_all(
                lease.workdir,
                f"Iteration {claim.number}: {claim.task_title}",
                f"agent-{claim.agent_id}",
                f"agent-{claim.agent_id}@constellation.local",
                gitdir=lease.gitdir,
            )
            report = transfer.push_workspace(
                claim.project_id, claim.iteration_id, claim.attempt, lease.gitdir, lease.base_sha
            )
            outcome.commit_sha, outcome.files_changed = report.sha, report.files_changed
        except Exception as exc:
            log.exception("iteration %s failed", claim.iteration_id)
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.error_kind = ErrorKind.INTERNAL
        finally:
            transfer.close()
            if lease is not None:
                held.append(lease)
        return outcome

    def _lease(self, claim: Claim, transfer: WorkspaceTransfer) -> Lease:
        """The iteration's workspace, checked out, and (from the warm pool) its sandbox."""
        workdir = self.settings.scratch_dir() / f"{claim.iteration_id}-{claim.attempt}"
        # The host's repository lives beside the sandbox's mount, never in it.
        gitdir = workdir.with_name(workdir.name + ".git")
        workdir.parent.mkdir(parents=True, exist_ok=True)
        limits = self._limits(claim)
        # A warm container was made without a harness's mounts: a harness iteration starts its own.
        cli = claim.config.harness_for(claim.category) != "api"
        if self.pool is None or self.pool.limits != limits or cli:
            return Lease(workdir, gitdir, transfer.fetch_workspace(claim.project_id, workdir, gitdir))
        fetched: list[str] = []
        sandbox = self.pool.acquire(
            lambda warm: fetched.append(transfer.fetch_workspace(claim.project_id, warm, gitdir))
        )
        return Lease(sandbox.host_workspace, gitdir, fetched[0], sandbox)

    def _session(self, claim: Claim, lease: Lease, emit: Emit) -> SessionResult:
        if claim.role is Role.VALIDATOR and claim.config.check_command:
            return self._check(claim, lease, emit)
        harness = claim.config.harness_for(claim.category)
        if harness != "api":
            return self._harness(claim, harness, lease, emit)
        client = llm.shared_client(self.settings)
        sandbox = lease.take_sandbox() or self._sandbox(claim, lease.workdir)
        try:
            publish = self.bus.publish
            return AgentSession(claim, sandbox, client, emit, limiter=self.limiter, publish=publish).run()
        finally:
            sandbox.close()

    def _limits(self, claim: Claim) -> SandboxLimits:
        """The project's limits; network only where the operator allows it at all."""
        limits = SandboxLimits.model_validate(claim.config.sandbox.model_dump())
        if limits.network and not self.settings.sandbox_network_allowed:
            return limits.model_copy(update={"network": False})
        return limits

    def _harness(self, claim: Claim, harness: str, lease: Lease, emit: Emit) -> SessionResult:
        """The iteration's agent is an agent CLI in the container, its calls through the gateway."""
        return HarnessSession(
            claim,
            harness,
            workdir=lease.workdir,
            cache=self.settings.harness_cache,
            start_sandbox=lambda mounts: self._sandbox(claim, lease.workdir, mounts),
            open_lease=self.open_lease or self._gateway_lease,
            emit=emit,
            timeout_s=self.settings.harness_timeout_s,
            on_host=self.settings.harness_on_host,
        ).run()

    def _gateway_lease(self, claim: Claim, emit: Emit, harness: str) -> LlmLease:
        """A lease on the process's one gateway (one event loop for every iteration's socket)."""
        with self._gateway_lock:
            if self._gateway is None:
                self._gateway = Gateway(self.settings, limiter=self.limiter, publish=self.bus.publish)
            gateway = self._gateway
        return gateway.open(claim, emit, harness=harness)

    def close(self) -> None:
        """Stop what the runner started for itself (the gateway, the heartbeats); the worker calls
        it at shutdown."""
        self.heartbeats.close()
        with self._gateway_lock:
            if self._gateway is not None:
                self._gateway.close()
                self._gateway = None

    def _sandbox(self, claim: Claim, workdir: Path, mounts: SandboxMounts | None = None) -> Sandbox:
        labels = sandbox_labels(claim, self.worker_name, cluster_id(self.settings.database_url))
        # Unique per attempt, so a re-run never collides with its dead predecessor's container.
        name = f"raas-{claim.iteration_id}-{claim.attempt}"
        if mounts is None:
            return self.start_sandbox(workdir, self._limits(claim), labels, name)
        return self.start_sandbox(workdir, self._limits(claim), labels, name, mounts)

    def _check(self, claim: Claim, lease: Lease, emit: Emit) -> SessionResult:
        """The validator gate: the project's check command in the sandbox; exit 0 passes."""
        command = claim.config.check_command or ""
        sandbox = lease.take_sandbox() or self._sandbox(claim, lease.workdir)
        try:
            result = sandbox.run(command)
        finally:
            sandbox.close()
        passed = result.exit_code == 0 and not result.timed_out
        output = result.output[-CHECK_OUTPUT_CHARS:]
        emit(
            ToolExecuted(
                tool="check", command=command, exit_code=result.exit_code, is_error=not passed, output=output
            )
        )
        timed_out = " (timed out)" if result.timed_out else ""
        summary = f"`{command}` exited with {result.exit_code}{timed_out}:\n{output}"
        return SessionResult(completed=passed, summary=summary, turns=0)
