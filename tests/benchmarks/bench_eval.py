"""The eval's own overhead (issue #27), each figure against a raw baseline measured in this run.

1. An attempt against the same project run plainly: the attempt's whole orchestration — the run
   written from an upload (suite checked, attempts' rows), the driver's admission and its project
   made through the normal submission path, the same iterations, the hidden test in a fresh
   container on the final workspace, and the report — against that project submitted and run
   to its end. Both run in this process on the real coordinator code, the real scripted model
   and real containers (tests/support/engine.py); the kinds alternate. Goal: <= 1.2x.
2. The report over 10,000 attempts (500 tasks x 2 configs x k=10, outcomes and costs seeded)
   against a plain ``SELECT`` of the same rows through psycopg. Goal: <= 20x.

The scripted model answers each call after ``--model-latency-s`` (2 s by default: a short answer
from a real model takes that or more; with 0 the project is all orchestration, and the attempt's
fixed cost — a fresh test container, the run's rows — weighs most: docs/benchmarks.md has both).

Run: ``.venv/bin/python -m tests.benchmarks.bench_eval [--samples N] [--attempts N] [--model-latency-s S]``.
Needs Postgres, Redis and Docker (the sandbox image); it makes its own database (dropped at the end).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import tarfile
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy import insert, select

from orchestrator.evals import report, store
from orchestrator.evals.configs import EvalConfig, attempt_cap, attempt_config, to_toml
from orchestrator.evals.driver import EvalDriver
from orchestrator.evals.suite import load_suite
from shared.db import session_scope
from shared.models import utcnow
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt, EvalRun, EvalRunStatus
from tests.benchmarks import rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.engine import Engine, engine
from workers.evaluation import verify_attempt

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "evals" / "four"
TASK = "fix-bug"
CONFIG = EvalConfig("bench", 'model = "claude-sonnet-4-6"\nmax_iterations = 1\n')
FIX = {"command": "sed -i 's/^BUG$/OK/' answer.txt"}


def script(latency_s: float) -> dict[str, object]:
    """Two calls: the fix, then task_complete; each answered after ``latency_s`` (a model's time)."""
    return {
        "responses": [
            {"content": [{"type": "tool_use", "name": "bash", "input": FIX}], "latency_s": latency_s},
            {
                "content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "fixed"}}],
                "latency_s": latency_s,
            },
        ],
        "when_exhausted": "error",
    }


def _upload(tmp: Path) -> Path:
    """The upload ``raas eval run`` makes, of the suite's one task."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(SUITE / "suite.toml", arcname="suite/suite.toml")
        tar.add(SUITE / TASK, arcname=f"suite/{TASK}")
        request = store.RunRequest(configs=[store.ConfigIn(name=CONFIG.name, toml=CONFIG.toml)], k=1)
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(store.REQUEST_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = tmp / f"upload-{time.monotonic_ns()}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


class _InProcess:
    """The worker's ``raas.eval_verify``, called in this process (what the engine does for
    iterations); it times each hidden test (fetch, box, test run, outcome written)."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.tests_s: list[float] = []

    def verify(self, attempt_id: str) -> None:
        started = time.perf_counter()
        verify_attempt(attempt_id, self.eng.settings)
        self.tests_s.append(time.perf_counter() - started)


PARTS: dict[str, list[float]] = {"run written": [], "hidden test": []}


def attempt_s(eng: Engine, tmp: Path) -> float:
    started = time.perf_counter()
    run = store.create_run(_upload(tmp), None, eng.settings)
    PARTS["run written"].append(time.perf_counter() - started)
    verifier = _InProcess(eng)
    driver = EvalDriver(eng.settings, eng.dispatcher, eng.bus, verifier)
    for _ in range(20):
        driver.run_once()
        with session_scope() as session:
            attempt = session.scalars(select(EvalAttempt).where(EvalAttempt.run_id == run.id)).one()
            state, project_id, outcome = attempt.state, attempt.project_id, attempt.outcome
        if state == AttemptState.DONE:
            break
        if project_id is not None:
            eng.run_to_end(project_id)
    built = report.build_report(run.id, None)
    elapsed = time.perf_counter() - started
    PARTS["hidden test"].append(sum(verifier.tests_s))
    assert outcome == AttemptOutcome.RESOLVED, (state, outcome)
    assert built["configs"][0]["resolved"] == 1
    return elapsed


def plain_s(eng: Engine) -> float:
    loaded = load_suite(SUITE)
    task = next(t for t in loaded.tasks if t.key == TASK)
    described = task.describe(loaded.root)
    toml = to_toml(attempt_config(described, CONFIG, attempt_cap(described, CONFIG, None), "plain"))
    started = time.perf_counter()
    project_id = eng.submit(task.instruction, toml, {"answer.txt": "BUG\n"})
    eng.run_to_end(project_id)
    return time.perf_counter() - started


def orchestration(samples: int, latency_s: float, tmp: Path) -> tuple[Figure, Check]:
    with engine(script(latency_s), tmp, anthropic_api_key=SecretStr("sk-bench")) as eng:
        attempt_s(eng, tmp), plain_s(eng)  # warm-up of both kinds
        for times in PARTS.values():
            times.clear()
        ours, plain = [], []
        for _ in range(samples):
            ours.append(attempt_s(eng, tmp))
            plain.append(plain_s(eng))
    figure = Figure(
        f"an attempt, admission to report (p50; model {latency_s:g} s a call)",
        statistics.median(ours) * 1000,
        statistics.median(plain) * 1000,
        "ms",
        "the project run plainly",
        goal_max=1.2,
    )
    spread = f"attempt {min(ours):.2f}-{max(ours):.2f} s, plain {min(plain):.2f}-{max(plain):.2f} s"
    parts = ", ".join(f"{name} {statistics.median(times) * 1000:.0f} ms" for name, times in PARTS.items())
    spread += f"; of an attempt (p50): {parts}"
    return figure, Check(f"range over {samples} each", True, spread)


def _big_run(attempts: int) -> str:
    tasks = attempts // 20
    rng = random.Random(27)
    with session_scope() as session:
        run = EvalRun(
            suite_name="bench",
            suite_digest="0" * 64,
            suite_archive=b"",
            tasks=[
                {
                    "id": f"t{i}",
                    "path": f"t{i}",
                    "difficulty": "easy",
                    "tags": [],
                    "time_limit_s": 600,
                    "budget_usd": "0.5",
                    "environment": None,
                }
                for i in range(tasks)
            ],  # fmt: skip
            configs=[{"name": "a", "toml": ""}, {"name": "b", "toml": ""}],
            k=10,
            concurrency=4,
            reproducibility={},
            status=EvalRunStatus.COMPLETED,
            created_at=utcnow(),
        )
        session.add(run)
        session.flush()
        rows = [
            {
                "id": f"{run.id[:8]}{n:08x}",
                "run_id": run.id,
                "task_key": f"t{i}",
                "config": config,
                "attempt": a,
                "state": AttemptState.DONE,
                "outcome": rng.choice(list(AttemptOutcome)),
                "infra_cause": None,
                "stop_reason": rng.choice(["completed", "failed: no iteration completed the task"]),
                "cost_usd": Decimal(rng.randint(1000, 90000)) / 1_000_000,
                "input_tokens": rng.randint(1000, 90000),
                "output_tokens": rng.randint(100, 9000),
                "iterations": rng.randint(1, 5),
                "wall_time_s": rng.random() * 300,
            }
            for n, (i, config, a) in enumerate(
                (i, c, a) for i in range(tasks) for c in ("a", "b") for a in range(1, 11)
            )
        ]
        session.execute(insert(EvalAttempt), rows)
        return run.id


def report_figure(svc: rig.Services, attempts: int, samples: int) -> tuple[Figure, Check]:
    run_id = _big_run(attempts)
    ours, raw = [], []
    with svc.pg() as conn:
        for _ in range(samples):
            started = time.perf_counter()
            built = report.build_report(run_id, None)
            json.dumps(built)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            rows = conn.execute("SELECT * FROM eval_attempts WHERE run_id = %s", (run_id,)).fetchall()
            raw.append(time.perf_counter() - started)
    counted = sum(c["attempts"] for c in built["configs"])
    figure = Figure(
        f"report over {len(rows):,} attempts (p50)",
        statistics.median(ours) * 1000,
        statistics.median(raw) * 1000,
        "ms",
        "a plain SELECT of the rows",
        goal_max=20,
    )
    return figure, Check("the report counts every attempt", counted == len(rows) == attempts, f"{counted}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=3, help="attempts and plain projects each")
    parser.add_argument("--attempts", type=int, default=10_000, help="attempts the report reads")
    parser.add_argument(
        "--model-latency-s", type=float, default=2.0, help="the scripted model's time per call (0: none)"
    )
    args = parser.parse_args()
    table = Table()
    with rig.services() as svc, tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        measured = (
            orchestration(args.samples, args.model_latency_s, Path(tmp)),
            report_figure(svc, args.attempts, 5),
        )
        for figure, check in measured:
            table.figures.append(figure)
            table.checks.append(check)
    print(f"machine: {rig.machine()}")
    table.print()
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
