"""A task keeps its container between its iterations (issue #26 point 4).

When an iteration of a task ends, its container is *parked* here instead of removed; the task's
next iteration on this worker process, within the idle window, *takes* it back: a fresh agent
context in the same filesystem (the workspace's ignored files, such as caches and build outputs,
``/tmp`` and ``$HOME``), without paying a container start. The iteration runner resets the
workspace to the new iteration's base commit first, so nothing of a failed attempt's tracked or
untracked files survives; commands' background processes never do (the helper kills them when
their command returns).

What keeps it safe:

- A parked container is keyed by :class:`TaskKey` (tenant, project, task) and labelled with it at
  creation; :meth:`TaskContainers.take` reads the labels back from the engine and hands it only
  to the same key, in the same cluster and worker, and only while it runs and answers. An
  iteration whose container would be made differently (image, limits, mounts: a changed
  snapshot) gets a new one.
- A project that pauses, stops, fails or completes loses its parked containers at once: the
  keeper listens to the projects' events (:meth:`TaskContainers.watch`) and drops them, and
  remembers the ending for a container still in use, so that it is not parked afterwards.
- Idle past the window, a container is removed. A worker that dies leaves its parked containers
  to the sweep (:mod:`workers.sandbox.sweeper`: a task container lives while its worker
  answers), and a worker that restarts under the same name removes its predecessor's
  (:func:`remove_predecessors`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass

from docker.errors import APIError, DockerException, NotFound

from shared import events
from shared.errors import SandboxError
from workers.sandbox.base import AgentProcess, ExecResult, Sandbox
from workers.sandbox.container import MANAGED_LABEL
from workers.sandbox.docker import DockerSandbox, engine_client

log = logging.getLogger(__name__)
TASK_LABEL = "raas.task"
TENANT_LABEL = "raas.tenant"
BOOT_LABEL = "raas.boot"
PID_LABEL = "raas.pid"
# This worker's incarnation: made when the worker imports its tasks, before a prefork pool forks,
# so its children share it; a worker restarted under the same name has another.
BOOT_ID = secrets.token_hex(6)
ENDINGS = frozenset(
    {events.PROJECT_PAUSED, events.PROJECT_STOPPED, events.PROJECT_FAILED, events.PROJECT_COMPLETED}
)
_ENDING_HINT = b'"type":"project_'
_RECONNECT_S = 2.0
# Generous: a container that does not answer is replaced, which costs a container start, and on a
# loaded host (a hundred iterations on two cores) its helper may take seconds to be scheduled.
PING_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TaskKey:
    """Whose a task container is: reuse never crosses tenants, projects or tasks."""

    tenant: str
    project: str
    task: str

    def labels(self) -> dict[str, str]:
        return {TENANT_LABEL: self.tenant, "raas.project": self.project, TASK_LABEL: self.task}


@dataclass
class Parked:
    """A parked container, with how it was made (what a new iteration's container is compared to)."""

    sandbox: DockerSandbox
    fingerprint: Hashable
    since: float


class TaskContainers:
    """The parked task containers of one worker process, and the thread that expires them.

    Safe for the threads of a threads worker: every map is changed under one lock, and a
    container is removed outside it.
    """

    def __init__(self, idle_s: float, cluster: str, worker: str) -> None:
        self.idle_s = idle_s
        self.cluster = cluster
        self.worker = worker
        self._parked: dict[TaskKey, Parked] = {}
        self._ended: dict[str, float] = {}  # project -> when its ending was heard
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        if idle_s > 0:
            self._start(self._expire_forever, "task-containers-expiry")

    @property
    def enabled(self) -> bool:
        return self.idle_s > 0

    def labels(self, key: TaskKey) -> dict[str, str]:
        """What a container made for ``key`` carries beside its iteration's labels."""
        return {**key.labels(), BOOT_LABEL: BOOT_ID, PID_LABEL: str(os.getpid())}

    def take(self, key: TaskKey) -> Parked | None:
        """``key``'s parked container, if it is still fresh, labelled as ``key`` and answering;
        the caller then owns it (and its ``host_workspace``). None: start a new one."""
        with self._lock:
            self._ended.pop(key.project, None)  # an iteration runs: the project runs again
            parked = self._parked.pop(key, None)
        if parked is None:
            return None
        sandbox = parked.sandbox
        why = self._unfit(key, parked)
        if why is None:
            log.debug("task %s reuses container %s", key.task, sandbox.name)
            return parked
        log.info("not reusing container %s of task %s: %s", sandbox.name, key.task, why)
        discard(sandbox)
        return None

    def park(self, key: TaskKey, sandbox: DockerSandbox, fingerprint: Hashable) -> bool:
        """Keep ``sandbox`` (and its ``host_workspace``) for ``key``'s next iteration. False when it
        is not kept (reuse off, the project ended, the container broken): the caller removes it."""
        if not self.enabled or not sandbox.is_usable:
            return False
        with self._lock:
            if self._stop.is_set() or key.project in self._ended:
                return False
            replaced = self._parked.get(key)
            self._parked[key] = Parked(sandbox, fingerprint, time.monotonic())
        if replaced is not None and replaced.sandbox is not sandbox:
            discard(replaced.sandbox)  # a second iteration of the task ran at once: keep the newer
        return True

    def parked(self) -> dict[TaskKey, str]:
        """Each parked key and its container's id (tests, logs)."""
        with self._lock:
            return {key: parked.sandbox.container_id for key, parked in self._parked.items()}

    def drop_project(self, project_id: str) -> int:
        """Remove the project's parked containers now, and park none of its containers in use;
        how many were removed."""
        with self._lock:
            self._ended[project_id] = time.monotonic()
            keys = [key for key in self._parked if key.project == project_id]
            dropped = [self._parked.pop(key).sandbox for key in keys]
        for sandbox in dropped:
            discard(sandbox)
        if dropped:
            log.info("project %s ended: removed its %d task container(s)", project_id, len(dropped))
        return len(dropped)

    def expire(self, now: float | None = None) -> int:
        """Remove the containers idle past the window (and forget old endings); how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            stale = [key for key, p in self._parked.items() if now - p.since >= self.idle_s]
            dropped = [self._parked.pop(key).sandbox for key in stale]
            self._ended = {p: at for p, at in self._ended.items() if now - at < max(self.idle_s, 60.0)}
        for sandbox in dropped:
            discard(sandbox)
        return len(dropped)

    def watch(self, redis_url: str) -> None:
        """Listen to every project's events (a thread): an ending drops the project's containers."""
        if self.enabled:
            self._start(lambda: self._listen_forever(redis_url), "task-containers-watch")

    def close(self) -> None:
        """Stop the threads and remove every parked container."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            dropped = [parked.sandbox for parked in self._parked.values()]
            self._parked.clear()
        for sandbox in dropped:
            discard(sandbox)

    def _unfit(self, key: TaskKey, parked: Parked) -> str | None:
        """Why the parked container may not serve ``key`` now (None: it may)."""
        if time.monotonic() - parked.since >= self.idle_s:
            return f"idle for more than {self.idle_s:g} s"
        sandbox = parked.sandbox
        try:
            info = sandbox.client.api.inspect_container(sandbox.container_id)
        except (APIError, DockerException, OSError) as exc:
            return f"the engine does not know it ({exc})"
        labels = info.get("Config", {}).get("Labels") or {}
        wanted = {**self.labels(key), "raas.cluster": self.cluster, "raas.worker": self.worker}
        wrong = sorted(name for name, value in wanted.items() if labels.get(name) != value)
        if wrong:
            return f"its labels {', '.join(wrong)} are not the task's"
        if not info.get("State", {}).get("Running"):
            return "it no longer runs"
        if not sandbox.is_responsive(PING_TIMEOUT_S):
            return "it does not answer"
        return None

    def _start(self, target: object, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _expire_forever(self) -> None:
        interval = min(max(self.idle_s / 4, 0.5), 15.0)
        while not self._stop.wait(interval):
            try:
                self.expire()
                remove_unremoved()
            except Exception:
                log.warning("expiring task containers failed", exc_info=True)

    def _listen_forever(self, redis_url: str) -> None:
        import redis

        while not self._stop.is_set():
            try:
                client = redis.Redis.from_url(redis_url)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(events.channel("*"))
                try:
                    while not self._stop.is_set():
                        message = pubsub.get_message(timeout=1.0)
                        if message is not None:
                            self._heard(message["data"])
                finally:
                    pubsub.close()
                    client.close()
            except Exception:
                # Missed endings cost only the idle window: the expiry removes their containers.
                log.warning("task containers: project events unavailable; retrying", exc_info=True)
                self._stop.wait(_RECONNECT_S)

    def _heard(self, raw: bytes | str) -> None:
        data = raw.encode() if isinstance(raw, str) else raw
        if _ENDING_HINT not in data:  # most events: output, tool calls; no parse for them
            return
        event = json.loads(data)
        if event.get("type") in ENDINGS:
            self.drop_project(str(event["project_id"]))


class LentSandbox(Sandbox):
    """A task container lent to one iteration's runner: its ``close`` gives it back to the
    iteration, which parks it (or removes it) once the iteration has ended."""

    def __init__(self, inner: DockerSandbox) -> None:
        self.inner = inner
        self.workspace_path = inner.workspace_path
        self.limits = inner.limits
        self._closed = False

    def _usable(self) -> DockerSandbox:
        if self._closed:
            msg = f"sandbox {self.inner.name} was given back"
            raise SandboxError(msg)
        return self.inner

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        return self._usable().run(command, timeout_s)

    def read_file(self, path: str) -> bytes:
        return self._usable().read_file(path)

    def write_file(self, path: str, data: bytes) -> None:
        self._usable().write_file(path, data)

    def list_glob(self, pattern: str) -> list[str]:
        return self._usable().list_glob(pattern)

    def grep(
        self, pattern: str, path: str = ".", glob: str | None = None, ignore_case: bool = False
    ) -> ExecResult:
        return self._usable().grep(pattern, path, glob, ignore_case)

    def spawn(self, argv: list[str], env: dict[str, str], timeout_s: float) -> AgentProcess:
        return self._usable().spawn(argv, env, timeout_s)

    def close(self) -> None:
        self._closed = True


def orphaned_here(labels: dict[str, str]) -> bool:
    """True for a task container of this worker's incarnation whose process has died (a prefork
    child killed): its worker still answers, but no one will take or expire the container."""
    if TASK_LABEL not in labels or labels.get(BOOT_LABEL) != BOOT_ID:
        return False
    try:
        os.kill(int(labels.get(PID_LABEL, "")), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError):
        return False
    return False


def discard(sandbox: DockerSandbox) -> None:
    """Remove a task container and the workspace directory it mounts. A container the engine
    could not remove (it was away) is tried again by the keeper's expiry (:func:`remove_unremoved`):
    the sweep leaves a live worker's task containers alone, so nothing else would."""
    sandbox.close()
    if not sandbox.removed and sandbox.container_id:
        with _unremoved_lock:
            _unremoved.add(sandbox.container_id)
    shutil.rmtree(sandbox.host_workspace, ignore_errors=True)


# Task containers of this process whose removal failed, to try again.
_unremoved: set[str] = set()
_unremoved_lock = threading.Lock()


def remove_unremoved() -> int:
    """Try again to remove the containers :func:`discard` could not; how many went."""
    with _unremoved_lock:
        waiting = list(_unremoved)
    if not waiting:
        return 0
    try:
        client = engine_client()
    except DockerException:
        return 0
    gone = 0
    try:
        for container_id in waiting:
            try:
                client.api.remove_container(container_id, force=True)
            except NotFound:
                pass
            except (APIError, DockerException, OSError):
                continue  # still away: the next tick
            with _unremoved_lock:
                _unremoved.discard(container_id)
            gone += 1
    finally:
        client.close()
    if gone:
        log.info("removed %d task container(s) whose removal had failed", gone)
    return gone


def remove_predecessors(worker: str, cluster: str) -> list[str]:
    """Remove the task containers a previous incarnation of ``worker`` left (it was killed and
    restarted under the same name, so the sweep takes it for alive); their names."""
    removed: list[str] = []
    try:
        client = engine_client()
    except DockerException as exc:
        log.warning("cannot look for a previous worker's task containers: %s", exc)
        return removed
    try:
        filters = {
            "label": [f"{MANAGED_LABEL}=true", TASK_LABEL, f"raas.worker={worker}", f"raas.cluster={cluster}"]
        }
        for summary in client.api.containers(all=True, filters=filters):
            if (summary.get("Labels") or {}).get(BOOT_LABEL) == BOOT_ID:
                continue
            try:
                client.api.remove_container(summary["Id"], force=True)
            except NotFound:
                continue
            except APIError as exc:
                log.warning("could not remove task container %s: %s", summary["Id"][:12], exc)
                continue
            removed.append((summary.get("Names") or [summary["Id"][:12]])[0].lstrip("/"))
    finally:
        client.close()
    if removed:
        log.info("removed %d task container(s) of this worker's previous run", len(removed))
    return removed
