"""``raas worker``: a Celery worker on the ``iterations`` queue, plus its sandbox sweeper.

It also consumes a queue of its own, ``worker.<node name>``: the coordinator sends a task's next
iteration there first, since this worker may hold the task's container (workers/sandbox/keeper.py),
and to the shared queue a moment later.

Two pools. ``threads`` (the default) runs ``--concurrency`` iterations as threads of one
process: an iteration spends nearly all its time waiting (the model's stream, a command in its
container, git), so one process of ~150 MiB holds as many as the host's containers allow. Its
database pool is sized for them (:func:`shared.db.size_pools`). ``prefork`` runs each
iteration in a process of its own (~130 MiB each): a crash or a leak stays in one iteration,
and Celery's hard time limit applies (it is prefork-only; in threads an iteration is bounded
by its turn cap and its calls' and commands' timeouts).

Either way the message is acknowledged only when the iteration has ended (late acks): a
process that dies hands every iteration it ran back, all N of them in threads, and the
coordinator's reconcile loop re-runs each as a new attempt once its heartbeat goes stale.
A warm shutdown (SIGTERM) lets the running iterations finish.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from celery.utils.nodenames import default_nodename, host_format

from shared.celery_app import ITERATIONS_QUEUE, run_worker_main, worker_queue
from shared.db import size_pools
from shared.errors import InvalidInput
from shared.harnesses import HARNESS_NAMES, check_binaries, installed
from shared.settings import Settings, get_settings
from workers.sandbox.keeper import remove_predecessors
from workers.sandbox.sweeper import cluster_id, sweep_forever

log = logging.getLogger(__name__)
POOLS = ("threads", "prefork")
DEFAULT_POOL = "threads"

_stop_sweeping = threading.Event()
_runnable: list[str] = []  # what check_harnesses found, for the worker_ready log line


@worker_ready.connect
def _start_sweeper(sender: Any = None, **_kwargs: Any) -> None:
    settings = get_settings()
    interval = settings.sandbox_sweep_interval_s
    hostname = getattr(sender, "hostname", None)
    if hostname:  # a previous run of this worker, killed, answers pings under its name again
        remove_predecessors(hostname, cluster_id(settings.database_url))
    threading.Thread(
        target=sweep_forever, args=(_stop_sweeping, interval), name="sandbox-sweeper", daemon=True
    ).start()


@worker_ready.connect
def _say_harnesses(**_kwargs: Any) -> None:
    # Celery's logging is set up by now; the check itself ran before it started.
    log.info("harnesses this worker can run: %s", ", ".join(_runnable))


@worker_shutdown.connect
def _stop_sweeper(**_kwargs: Any) -> None:
    _stop_sweeping.set()


def check_options(pool: str, concurrency: int, settings: Settings) -> None:
    """Refuse a worker that could not run as asked, in one line that says what to change.

    Raises:
        InvalidInput: an unknown pool, a concurrency below 1, or a threads worker whose
            database pool (RAAS_DB_POOL_SIZE + RAAS_DB_MAX_OVERFLOW) holds fewer connections
            than it runs iterations.
    """
    if pool not in POOLS:
        msg = f"--pool {pool!r} is not a pool; use {' or '.join(POOLS)}"
        raise InvalidInput(msg)
    if concurrency < 1:
        msg = f"--concurrency {concurrency}: a worker runs at least 1 iteration at once"
        raise InvalidInput(msg)
    if pool == "threads" and settings.db_pool_size is not None:
        connections = settings.db_pool_size + settings.db_max_overflow
        if connections < concurrency:
            msg = (
                f"the database pool holds {connections} connections (RAAS_DB_POOL_SIZE "
                f"{settings.db_pool_size} + RAAS_DB_MAX_OVERFLOW {settings.db_max_overflow}), fewer than "
                f"--concurrency {concurrency}: every running iteration needs one; raise them, or unset "
                "RAAS_DB_POOL_SIZE to size the pool for the concurrency"
            )
            raise InvalidInput(msg)


def check_harnesses(required: list[str], settings: Settings) -> list[str]:
    """The agent CLIs this worker can run (their pinned binaries are in RAAS_HARNESS_CACHE),
    logged; a worker asked to run one it cannot refuses to start.

    Raises:
        InvalidInput: an unknown harness in ``required``, or one's binary missing or of the
            wrong version (one line naming the setup command).
    """
    for harness in required:
        if harness not in HARNESS_NAMES:
            msg = f"--harnesses: unknown harness {harness!r}; choices: {', '.join(HARNESS_NAMES)}"
            raise InvalidInput(msg)
    check_binaries(required, settings.harness_cache)
    problems = installed(settings.harness_cache)
    for harness, problem in problems.items():
        if problem is not None:
            log.warning("this worker cannot run the %s harness: %s", harness, problem)
    # A harness with no binary (api) has no problem to find: it runs everywhere.
    _runnable[:] = [h for h in HARNESS_NAMES if problems.get(h) is None]
    return list(_runnable)


def run_worker(
    concurrency: int, name: str | None = None, pool: str = DEFAULT_POOL, harnesses: list[str] | None = None
) -> None:
    """Run the worker until it is stopped; exit with its exit code.

    ``harnesses`` (default RAAS_WORKER_HARNESSES) are the agent CLIs it must be able to run.

    Raises:
        InvalidInput: see :func:`check_options` and :func:`check_harnesses`.
    """
    settings = get_settings()
    check_options(pool, concurrency, settings)
    check_harnesses(settings.worker_harnesses if harnesses is None else harnesses, settings)
    if pool == "threads":
        size_pools(concurrency)
    import workers.tasks  # noqa: F401  (registers run_iteration)

    # As Celery expands it (``%h``, a bare name): the node name iterations record as their worker.
    hostname = host_format(
        default_nodename(name or settings.worker_name or f"iterations@{socket.gethostname()}")
    )
    run_worker_main(
        [
            "worker",
            "--queues",
            # Its own queue too: a task's next iteration is sent there first (its container is here).
            f"{ITERATIONS_QUEUE},{worker_queue(hostname)}",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--hostname",
            hostname,
            "--loglevel",
            "INFO",
        ]
    )
