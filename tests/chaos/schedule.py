"""The faults of one soak, drawn in full from its seed before anything starts, so a seed names
the same sequence of faults every time (what lands where still depends on timing).

A fault: when (seconds after the start), what, which replica or worker, and how long the piece
stays down before it is brought back (a worker or a coordinator is restarted as a supervisor
would; Redis comes back empty on its port; Postgres after a fast shutdown; Docker and the object
store after an outage).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORKER = "worker"
COORDINATOR = "coordinator"
REDIS = "redis"
POSTGRES = "postgres"
DOCKER = "docker"
STORE = "store"

# Seconds each piece stays down: (least, most).
DOWN_S = {
    WORKER: (1.0, 5.0),
    COORDINATOR: (0.0, 4.0),
    REDIS: (1.0, 4.0),
    POSTGRES: (1.0, 5.0),
    DOCKER: (3.0, 12.0),
    STORE: (2.0, 10.0),
}


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    target: int  # the worker's or the coordinator replica's index; 0 for the others
    down_s: float

    def describe(self) -> str:
        where = f"{self.kind}{self.target}" if self.kind in (WORKER, COORDINATOR) else self.kind
        return f"t+{self.at_s:.0f}s {where} down {self.down_s:.1f}s"


def plan_faults(
    rng: random.Random, *, window_s: float, interval_s: float, workers: int, replicas: int, store: bool
) -> list[Fault]:
    """Faults every ``interval_s`` on average (each gap uniform in ½–1½ of it) until ``window_s``,
    their kinds drawn evenly among the pieces there are."""
    kinds = [WORKER, COORDINATOR, REDIS, POSTGRES, DOCKER] + ([STORE] if store else [])
    faults: list[Fault] = []
    at = rng.uniform(0.5, 1.0) * interval_s
    while at < window_s:
        kind = rng.choice(kinds)
        target = rng.randrange(workers if kind == WORKER else replicas if kind == COORDINATOR else 1)
        least, most = DOWN_S[kind]
        faults.append(Fault(round(at, 1), kind, target, round(rng.uniform(least, most), 1)))
        at += rng.uniform(0.5, 1.5) * interval_s
    return faults
