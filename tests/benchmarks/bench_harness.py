"""A harness iteration's fixed overhead against the api harness's, both measured in this run on
the same one-call script (the model answers "done" at once): ratio and where the time goes.

Each iteration runs in-process (the engine of tests/support) with a container of its own. For the
harness (Claude Code) the time is split into: ``before container`` (claim, workspace fetch, the
gateway lease), ``container start``, ``CLI to its call`` (the binary starting up until its one
model call is recorded, minus the call), ``call``, ``after the call`` (the CLI ending, the
container removed, commit and push), as the wrapped sandbox factory and the stored message saw
them. The api harness's split is the same without a CLI.

Run: ``.venv/bin/python -m tests.benchmarks.bench_harness [--iterations N]``.
Needs Postgres, Redis, Docker and the pinned Claude Code (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from pydantic import SecretStr

from shared.db import session_scope
from shared.models import Iteration, Message
from tests.benchmarks import rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.engine import Engine, engine
from tests.support.sandboxes import WatchedSandboxes
from workers.sandbox.base import Sandbox

PHASES = ("before container", "container start", "CLI to its call", "call", "after the call", "iteration")
SCRIPT = {
    "responses": [{"content": [{"type": "text", "text": "Nothing to do. TASK COMPLETE"}]}],
    "when_exhausted": "repeat_last",
}


class TimedSandboxes(WatchedSandboxes):
    """The worker's own factory, noting when each container start began and ended."""

    def __init__(self, image: str) -> None:
        super().__init__(image)
        self.starts: list[tuple[float, float]] = []

    def started(self, sandbox: Sandbox, began: float) -> None:
        self.starts.append((began, time.time()))


def one(eng: Engine, sandboxes: TimedSandboxes, raas_toml: str) -> dict[str, float]:
    project_id = eng.submit(raas_toml=raas_toml)
    eng.run_next(project_id)
    with session_scope() as session:
        iteration = session.query(Iteration).filter_by(project_id=project_id).one()
        reply = session.query(Message).filter_by(project_id=project_id, role="assistant").one()
        assert iteration.completed_task, iteration.error
        assert iteration.started_at is not None
        assert iteration.finished_at is not None
        claimed, finished = iteration.started_at.timestamp(), iteration.finished_at.timestamp()
        stored, call = reply.created_at.timestamp(), float(reply.duration_s or 0.0)
    began, started = sandboxes.starts[-1]
    return {
        "before container": began - claimed,
        "container start": started - began,
        "CLI to its call": stored - call - started,
        "call": call,
        "after the call": finished - stored,
        "iteration": finished - claimed,
    }


def measure(args: argparse.Namespace, tmp: Path) -> Table:
    sandboxes = TimedSandboxes(args.image)
    samples: dict[str, dict[str, list[float]]] = {"api": defaultdict(list), "claude-code": defaultdict(list)}
    toml = {"api": 'completion_marker = "TASK COMPLETE"\n'}
    toml["claude-code"] = 'harness = "claude-code"\n' + toml["api"]
    with engine(SCRIPT, tmp, anthropic_api_key=SecretStr("sk-bench-key")) as eng:
        eng.sandbox_factory = sandboxes
        for harness in ("api", "claude-code"):  # one warm-up each (image and binary in the page cache)
            one(eng, sandboxes, toml[harness])
        for _ in range(args.iterations):  # interleaved, so drift hits both alike
            for harness in ("api", "claude-code"):
                for phase, seconds in one(eng, sandboxes, toml[harness]).items():
                    samples[harness][phase].append(seconds)
    api, cli = samples["api"], samples["claude-code"]
    table = Table()
    table.figures.append(
        Figure(
            "iteration, one model call (p50)",
            statistics.median(cli["iteration"]) * 1000,
            statistics.median(api["iteration"]) * 1000,
            "ms",
            "the api harness, same script",
        )
    )
    for phase in PHASES[:-1]:
        ours, theirs = statistics.median(cli[phase]) * 1000, statistics.median(api[phase]) * 1000
        table.checks.append(Check(f"{phase} (p50)", True, f"claude-code {ours:.0f} ms, api {theirs:.0f} ms"))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=5, help="iterations of each harness")
    parser.add_argument("--image", default="constellation-sandbox:bookworm")
    args = parser.parse_args()
    with rig.services(), tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        table = measure(args, Path(tmp))
    table.print()
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
