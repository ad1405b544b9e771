"""Running one claimed iteration end to end: workspace in, its runner run, commit back.

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
from shared.events import EventBus, EventData
from shared.git import commit_all, ignore_by_default
from shared.models import ErrorKind
from shared.project_config.environment import ENVIRONMENT_FILE
from shared.scud import write_back
from shared.settings import Settings
from workers import records
from workers.claim import Claim, beat, claim_iteration
from workers.environment import Environments, Prepared, SetupFailed
from workers.gateway.server import Gateway
from workers.llm.ratelimit import RateLimiter
from workers.records import Outcome
from workers.runners.base import Emit, RunFailure, RunResult, StartSandbox
from workers.runners.build import Lent, build_runner, recipe_for
from workers.runners.cli.runner import LlmLease, OpenLease
from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.container import SandboxMounts, chown_workspace
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.factory import DockerSandboxConfig, SandboxFactory, factory_for
from workers.sandbox.keeper import LentSandbox, Parked, TaskContainers, TaskKey, discard
from workers.sandbox.pool import SandboxPool
from workers.sandbox.sweeper import cluster_id
from workers.workspace_transfer import WorkspaceTransfer

log = logging.getLogger(__name__)


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
                beat(running)
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
    """What an iteration holds while it runs; ``release`` gives every part of it back.

    A task's iteration (``task_key``) may hold its task's container: ``taken`` from the keeper
    before it starts, then ``task_sandbox`` once lent to its runner, with how it was made
    (``fingerprint``). :meth:`park` hands that container (and the workspace it mounts) back to the
    keeper for the task's next iteration.
    """

    workdir: Path
    gitdir: Path
    base_sha: str
    sandbox: Sandbox | None = None
    environment: Prepared | None = None
    task_key: TaskKey | None = None
    taken: Parked | None = None
    task_sandbox: DockerSandbox | None = None
    fingerprint: tuple[str, ...] = ()
    parked: bool = False

    def take_sandbox(self) -> Sandbox | None:
        sandbox, self.sandbox = self.sandbox, None
        return sandbox

    def park(self, keeper: TaskContainers) -> bool:
        """Keep the task's container for its next iteration; False if the keeper would not."""
        if self.task_key is None or self.task_sandbox is None:
            return False
        if not keeper.park(self.task_key, self.task_sandbox, self.fingerprint):
            return False
        self.task_sandbox, self.parked = None, True  # the keeper's now, with the workspace it mounts
        return True

    def release(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        if self.task_sandbox is not None:
            self.task_sandbox.close()
        if self.taken is not None:
            discard(self.taken.sandbox)
        if not self.parked:
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
        keeper: TaskContainers | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.worker_name = worker_name
        # None: every iteration in a container of its own from the sandbox image.
        self.start_sandbox = sandbox_factory or factory_for(DockerSandboxConfig(image=settings.sandbox_image))
        self.limiter = limiter
        self.pool = pool
        # Where a task's container waits for the task's next iteration (None: never kept).
        self.keeper = keeper
        # A harness iteration's LLM gateway lease (None: the worker's gateway).
        self.open_lease = open_lease
        self._gateway: Gateway | None = None  # made by the first harness iteration
        self._gateway_lock = threading.Lock()
        self.heartbeats = Heartbeats(settings.heartbeat_interval_s)
        self.environments = Environments(
            settings.scratch_dir() / "environments", settings.sandbox_image, settings.sandbox_network_allowed
        )

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
        claim = claim_iteration(
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
            # Parked before the report: an ending the coordinator decides on it is heard after.
            self._park(claim, outcome, held)
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
                lease.environment = self._environment(claim, lease.workdir)
            except SetupFailed as failure:  # before any model call: nothing is charged
                outcome.error, outcome.error_kind = str(failure), ErrorKind.ENVIRONMENT
                return outcome
            try:
                result = self._run_agent(claim, lease, emit)
                outcome.completed_task, outcome.summary = result.completed, result.summary
            except RunFailure as failure:
                outcome.error, outcome.error_kind = str(failure), failure.kind
            if claim.parallel:
                return outcome  # a parallel agent's copy is thrown away; its report is what counts
            if outcome.completed_task and finishes_task(claim):
                record_scud_status(claim, lease.workdir)
            if lease.environment is not None:
                lease.environment.unlink()
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

    def _park(self, claim: Claim, outcome: Outcome, held: list[Lease]) -> None:
        """Keep the task's container for its next iteration, unless this one finished the task."""
        if self.keeper is None or (outcome.completed_task and finishes_task(claim)):
            return
        for lease in held:
            if lease.park(self.keeper):
                log.debug("iteration %s parked its task's container", claim.iteration_id)

    def task_key(self, claim: Claim) -> TaskKey | None:
        """Under which key this iteration's container is kept for its task's next iteration; None
        when it is not kept: reuse off, a subagent (parallel ones run beside the task's own), or an
        agent CLI (its container mounts the iteration's own gateway socket)."""
        if self.keeper is None or not self.keeper.enabled or claim.parallel or claim.depth > 0:
            return None
        if not recipe_for(claim).warm_sandbox:
            return None
        return TaskKey(claim.tenant_id or "", claim.project_id, claim.task_id or claim.agent_id)

    def _lease(self, claim: Claim, transfer: WorkspaceTransfer) -> Lease:
        """The iteration's workspace, checked out, and (from the warm pool) its sandbox."""
        workdir = self.settings.scratch_dir() / f"{claim.iteration_id}-{claim.attempt}"
        # The host's repository lives beside the sandbox's mount, never in it.
        gitdir = workdir.with_name(workdir.name + ".git")
        workdir.parent.mkdir(parents=True, exist_ok=True)
        key = self.task_key(claim)
        if key is not None:
            return self._task_lease(claim, transfer, key, workdir, gitdir)
        limits = self._limits(claim)
        # A warm container was made without mounts: a runner that needs them starts its own.
        # A project's own environment never runs in a warm container of the plain image.
        plain = not claim.config.environment.active
        if self.pool is None or self.pool.limits != limits or not recipe_for(claim).warm_sandbox or not plain:
            return Lease(workdir, gitdir, transfer.fetch_workspace(claim.project_id, workdir, gitdir))
        fetched: list[str] = []
        sandbox = self.pool.acquire(
            lambda warm: fetched.append(transfer.fetch_workspace(claim.project_id, warm, gitdir))
        )
        return Lease(sandbox.host_workspace, gitdir, fetched[0], sandbox)

    def _task_lease(
        self, claim: Claim, transfer: WorkspaceTransfer, key: TaskKey, workdir: Path, gitdir: Path
    ) -> Lease:
        """A task's iteration: in its task's parked container's workspace, reset to the base commit
        (ignored files kept), or in a new directory for a new container."""
        assert self.keeper is not None
        taken = self.keeper.take(key)
        if taken is None:
            return Lease(
                workdir, gitdir, transfer.fetch_workspace(claim.project_id, workdir, gitdir), task_key=key
            )
        workdir = taken.sandbox.host_workspace
        try:
            base_sha = transfer.fetch_workspace(
                claim.project_id, workdir, gitdir, keep_ignored=claim.config.default_ignore
            )
            chown_workspace(workdir)
        except BaseException:
            discard(taken.sandbox)
            raise
        return Lease(workdir, gitdir, base_sha, task_key=key, taken=taken)

    def _task_sandbox(
        self, claim: Claim, lease: Lease, mounts: SandboxMounts | None, network: bool
    ) -> Sandbox:
        """The task's container, lent: the parked one when it was made as this iteration's would
        be, else a new one labelled with the task (kept afterwards)."""
        assert self.keeper is not None
        assert lease.task_key is not None
        limits = self._limits(claim, network)
        image = mounts.image if mounts is not None and mounts.image else self.settings.sandbox_image
        fingerprint = (image, limits.model_dump_json(), mounts.model_dump_json() if mounts else "")
        taken, lease.taken = lease.taken, None
        if taken is not None:
            if taken.fingerprint == fingerprint:
                lease.task_sandbox, lease.fingerprint = taken.sandbox, fingerprint
            else:
                log.info("task container %s was made otherwise (its environment changed)", taken.sandbox.name)
                taken.sandbox.close()  # the workspace it mounted is this iteration's: it stays
        if lease.task_sandbox is not None and lease.fingerprint != fingerprint:
            lease.task_sandbox.close()  # a second container of the iteration, made otherwise
            lease.task_sandbox = None
        if lease.task_sandbox is None:
            sandbox = self._sandbox(claim, lease.workdir, mounts, network, self.keeper.labels(lease.task_key))
            if not isinstance(sandbox, DockerSandbox):
                return sandbox  # a test's factory or the local sandbox: nothing to keep
            lease.task_sandbox, lease.fingerprint = sandbox, fingerprint
        return LentSandbox(lease.task_sandbox)

    def _run_agent(self, claim: Claim, lease: Lease, emit: Emit) -> RunResult:
        """The claim's runner (its harness's, or the validator's check), built and run."""
        lent = Lent(
            settings=self.settings,
            workdir=lease.workdir,
            start_sandbox=self._starter(claim, lease),
            emit=emit,
            publish=self.bus.publish,
            open_lease=self.open_lease or self._gateway_lease,
            limiter=self.limiter,
        )
        return build_runner(claim, lent).run()

    def _starter(self, claim: Claim, lease: Lease) -> StartSandbox:
        """The iteration's sandbox on demand: the leased warm one when it can serve, else a new one."""

        def start(mounts: SandboxMounts | None) -> Sandbox:
            environment = lease.environment
            if environment is not None:
                mounts = environment.mounts.merged(mounts)
            warm = lease.take_sandbox() if mounts is None else None
            full = environment is not None and environment.full_network
            if lease.task_key is not None:
                return self._task_sandbox(claim, lease, mounts, full)
            return warm or self._sandbox(claim, lease.workdir, mounts, network=full)

        return start

    def _environment(self, claim: Claim, workdir: Path) -> Prepared | None:
        """The project's environment made ready on ``workdir`` (None: the plain sandbox)."""
        config = claim.config.environment
        if not config.active and not (workdir / ENVIRONMENT_FILE).is_file():
            return None
        labels = sandbox_labels(claim, self.worker_name, cluster_id(self.settings.database_url))
        prepared = self.environments.prepare(config, workdir, labels)
        made = "made now" if prepared.built else "already on this host"
        made = f"pulled from {prepared.pulled}" if prepared.pulled else made
        log.info("iteration %s runs in %s (%s)", claim.iteration_id, prepared.mounts.image, made)
        return prepared

    def _limits(self, claim: Claim, network: bool = False) -> SandboxLimits:
        """The project's limits; network only where the operator allows it at all."""
        limits = SandboxLimits.model_validate(claim.config.sandbox.model_dump())
        if network:
            limits = limits.model_copy(update={"network": True})
        if limits.network and not self.settings.sandbox_network_allowed:
            return limits.model_copy(update={"network": False})
        return limits

    def _gateway_lease(self, claim: Claim, emit: Emit) -> LlmLease:
        """A lease on the process's one gateway (one event loop for every iteration's socket)."""
        with self._gateway_lock:
            if self._gateway is None:
                self._gateway = Gateway(self.settings, limiter=self.limiter, publish=self.bus.publish)
            gateway = self._gateway
        return gateway.open(claim, emit)

    def close(self) -> None:
        """Stop what the runner started for itself (the gateway, the heartbeats); the worker calls
        it at shutdown."""
        self.heartbeats.close()
        self.environments.close()
        if self.keeper is not None:
            self.keeper.close()  # the tasks' parked containers go with the worker
        with self._gateway_lock:
            if self._gateway is not None:
                self._gateway.close()
                self._gateway = None

    def _sandbox(
        self,
        claim: Claim,
        workdir: Path,
        mounts: SandboxMounts | None = None,
        network: bool = False,
        task_labels: dict[str, str] | None = None,
    ) -> Sandbox:
        labels = sandbox_labels(claim, self.worker_name, cluster_id(self.settings.database_url))
        labels.update(task_labels or {})
        # Unique per attempt, so a re-run never collides with its dead predecessor's container.
        name = f"raas-{claim.iteration_id}-{claim.attempt}"
        limits = self._limits(claim, network)
        if mounts is None:
            return self.start_sandbox(workdir, limits, labels, name)
        return self.start_sandbox(workdir, limits, labels, name, mounts)
