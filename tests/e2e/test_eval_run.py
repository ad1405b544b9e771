"""``raas eval run`` end to end (issue #27): a coordinator, a worker and the scripted model as
real processes, Postgres, Redis and Docker.

The suite (tests/fixtures/evals/four) has four tasks; the scripted model (script.json) fixes
``BUG`` in an iteration's first call and ``BAD`` in the second iteration, so with one iteration
(config ``one-iteration``) it solves fix-bug, with two (``two-iterations``) fix-bug and fix-bad;
``never`` is solved by neither, and ``broken-env``'s environment setup fails before any model
call (an infrastructure failure). With k=2 every figure of the report is known by hand.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Event, Message, Project
from shared.models.evals import AttemptState, EvalAttempt
from tests.support.evals import run_report, wait_run
from tests.support.stack import Stack, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "evals"
SUITE = FIXTURES / "four"
ONE, TWO = FIXTURES / "configs" / "one-iteration.toml", FIXTURES / "configs" / "two-iterations.toml"
MARK = "HIDDEN_MARK_27"

# The scripted calls' prices on claude-sonnet-4-6 ($3 in, $15 out, cache writes $3.75, reads
# $0.30 per million): input, output, cache write, cache read of each step, by hand.
CALL_1 = Decimal("0.005340")  # 1000*3 + 100*15 + 200*3.75 + 300*0.3 = 5340 per million
CALL_2 = Decimal("0.003690")  # 1100*3 + 20*15 + 300*0.3
CALL_3 = Decimal("0.004440")  # 1200*3 + 50*15 + 300*0.3
CALL_4 = Decimal("0.004440")  # 1300*3 + 30*15 + 300*0.3
ONE_ITERATION = CALL_1 + CALL_2  # 0.009030
TWO_ITERATIONS = CALL_1 + CALL_2 + CALL_3 + CALL_4  # 0.017910


@pytest.fixture(scope="module")
def stack(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("eval")
    running = Stack(log_dir=tmp / "logs", script=FIXTURES / "script.json").start(workers=1, concurrency=3)
    yield running
    running.stop()


def _start(stack: Stack, *args: str) -> str:
    done = stack.cli("eval", "run", str(SUITE), *args, "--json")
    assert done.returncode == 0, done.stderr + stack.logs()
    run_id: str = json.loads(done.stdout)["id"]
    return run_id


def _wait(stack: Stack, run_id: str) -> None:
    wait_run(stack, run_id, timeout_s=900, poll_s=1)


def _attempts(run_id: str) -> list[EvalAttempt]:
    with session_scope() as session:
        rows = session.scalars(select(EvalAttempt).where(EvalAttempt.run_id == run_id)).all()
        session.expunge_all()
        return list(rows)


def _projects(run_id: str) -> list[str]:
    with session_scope() as session:
        return list(
            session.scalars(select(Project.id).where(Project.name.startswith(f"eval {run_id} "))).all()
        )


def test_the_report_of_four_tasks_two_configs_k2_equals_the_hand_computed_figures(stack: Stack) -> None:
    # Given: 4 tasks x 2 configs x k=2, four attempts at a time.
    run_id = _start(stack, "--config", str(ONE), "--config", str(TWO), "-k", "2", "--concurrency", "4")
    _wait(stack, run_id)
    report = run_report(stack, run_id, "--json")
    one, two = report["configs"]
    assert report["run"]["status"] == "completed"
    # one-iteration: fix-bug resolved twice; fix-bad and never failed; broken-env an infra failure.
    assert (one["name"], one["attempts"], one["resolved"], one["failed"], one["infra"]) == (
        "one-iteration",
        8,
        2,
        4,
        2,
    )
    assert (two["name"], two["attempts"], two["resolved"], two["failed"], two["infra"]) == (
        "two-iterations",
        8,
        4,
        2,
        2,
    )
    assert (one["resolve_rate"], one["pass_at_k"], one["pass_hat_k"]) == (0.25, 0.25, 0.25)
    assert (two["resolve_rate"], two["pass_at_k"], two["pass_hat_k"]) == (0.5, 0.5, 0.5)
    # Every attempt but broken-env's (no model call) paid its iterations' calls, once.
    assert Decimal(one["cost_usd"]) == 6 * ONE_ITERATION
    assert Decimal(two["cost_usd"]) == 6 * TWO_ITERATIONS
    assert Decimal(one["usd_per_resolved"]) == 6 * ONE_ITERATION / 2  # 0.027090
    assert Decimal(two["usd_per_resolved"]) == 6 * TWO_ITERATIONS / 4  # 0.026865
    assert one["tokens"] == {
        "input": 6 * 2100,
        "output": 6 * 120,
        "cache_read": 6 * 600,
        "cache_write": 6 * 200,
    }
    assert (one["iterations"], two["iterations"]) == (8, 14)  # broken-env: one failed iteration each
    assert list(one["infra_causes"].values()) == [2]
    assert next(iter(one["infra_causes"])).startswith("environment: ")
    solved = {t["id"]: t["solved_by"] for t in report["tasks"]}
    assert solved == {
        "broken-env": {"one-iteration": "0/2", "two-iterations": "0/2"},
        "fix-bad": {"one-iteration": "0/2", "two-iterations": "2/2"},
        "fix-bug": {"one-iteration": "2/2", "two-iterations": "2/2"},
        "never": {"one-iteration": "0/2", "two-iterations": "0/2"},
    }
    assert report["not_run"] == []
    assert report["run"]["reproducibility"]["models"] == ["claude-sonnet-4-6"]
    assert report["run"]["reproducibility"]["test_image_ids"]
    # Each attempt is one project, visible as any other.
    attempts = _attempts(run_id)
    assert len(attempts) == 16
    assert len({a.project_id for a in attempts}) == 16
    assert sorted(_projects(run_id)) == sorted(a.project_id for a in attempts if a.project_id)
    # Then: the hidden tests were never visible to the agent: the scripted agent's grep for them
    # (and its look at /raas-tests) found nothing, and no transcript or event holds their text.
    project_ids = [a.project_id for a in attempts]
    with session_scope() as session:
        contents = session.scalars(select(Message.content).where(Message.project_id.in_(project_ids))).all()
        data = session.scalars(select(Event.data).where(Event.project_id.in_(project_ids))).all()
    assert contents
    assert MARK not in json.dumps(contents)
    assert MARK not in json.dumps(data)
    results = [
        block for content in contents for block in content
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]  # fmt: skip
    assert any("No such file or directory" in json.dumps(block) for block in results)
    # The other formats say the same.
    markdown = run_report(stack, run_id, "--md")
    assert "| one-iteration | 2/8 | 25.0% |" in markdown
    assert "| fix-bad | 0/2 | 2/2 |" in markdown
    csv_lines = run_report(stack, run_id, "--csv").splitlines()
    assert csv_lines[1].startswith("one-iteration,8,2,4,2,0,0.25,")
    # A paired comparison of the two configurations of the run: B wins fix-bad's 2 pairs only.
    compared = json.loads(
        stack.cli("eval", "compare", f"{run_id}:one-iteration", f"{run_id}:two-iterations", "--json").stdout
    )
    assert (compared["pairs"], compared["only_a"], compared["only_b"]) == (8, 0, 2)
    assert compared["mcnemar_p"] == 0.5  # 2 * (1/2)^2


def test_a_budget_that_runs_out_pauses_the_rest_and_the_report_names_them(stack: Stack) -> None:
    # Given: $0.51 for attempts capped at $0.50: one at a time, and only while what was spent
    # plus the next cap fits. broken-env costs nothing, fix-bad and fix-bug $0.009030 each:
    # 0.018060 + 0.50 > 0.51, so never does not run.
    run_id = _start(
        stack,
        "--config",
        str(ONE),
        "-k",
        "1",
        "--budget",
        "0.51",
        "--attempt-budget",
        "0.5",
        "--concurrency",
        "4",
    )
    _wait(stack, run_id)
    report = run_report(stack, run_id, "--json")
    assert report["run"]["status"] == "paused"
    assert report["not_run"] == [
        {"task": "never", "config": "one-iteration", "attempt": 1, "state": "paused"}
    ]
    assert "1 attempt(s) did not run" in report["run"]["status_reason"]
    assert Decimal(report["run"]["spent_usd"]) == 2 * ONE_ITERATION
    assert Decimal(report["run"]["spent_usd"]) <= Decimal("0.51")
    (one,) = report["configs"]
    assert (one["attempts"], one["resolved"], one["not_run"]) == (3, 1, 1)
    assert len(_projects(run_id)) == 3
    assert "Did not run (1)" in run_report(stack, run_id, "--md")


def test_a_run_whose_worker_and_coordinator_are_killed_resumes_and_runs_no_attempt_twice(
    stack: Stack,
) -> None:
    # Given: a run under way: an attempt's project has an iteration running.
    run_id = _start(stack, "--config", str(TWO), "-k", "1", "--concurrency", "4")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with session_scope() as session:
            running = session.scalar(
                select(func.count()).where(
                    EvalAttempt.run_id == run_id, EvalAttempt.state == AttemptState.RUNNING
                )
            )
        if running:
            break
        time.sleep(0.2)
    assert running, stack.logs()
    # When: the worker and the coordinator are killed (SIGKILL), then started again.
    for name in ("worker0", "coordinator"):
        os.killpg(stack.procs[name].pid, signal.SIGKILL)
        stack.procs[name].wait()
    coordinator = stack.spawn("coordinator", ["coordinator", "--port", str(stack.coordinator_port)])
    wait_http(f"http://127.0.0.1:{stack.coordinator_port}/healthz", proc=coordinator)
    stack.spawn_worker(0, 3)
    _wait(stack, run_id)
    # Then: every attempt ended once, with one project each, and was charged what its project's
    # calls cost, once (the project's own ledger agrees).
    attempts = _attempts(run_id)
    assert {a.state for a in attempts} == {AttemptState.DONE}
    assert len(_projects(run_id)) == 4
    assert sorted(_projects(run_id)) == sorted(a.project_id for a in attempts if a.project_id)
    with session_scope() as session:
        for attempt in attempts:
            project = session.get_one(Project, attempt.project_id)
            paid = session.scalar(
                select(func.coalesce(func.sum(Message.cost_usd), 0)).where(Message.project_id == project.id)
            )
            assert attempt.cost_usd == Decimal(str(paid)) == project.spent_usd
    report = run_report(stack, run_id, "--json")
    assert report["configs"][0]["attempts"] == 4
    assert Decimal(report["run"]["spent_usd"]) == sum((a.cost_usd for a in attempts), Decimal(0))


def test_check_on_the_workers_admits_what_the_local_check_admits(stack: Stack) -> None:
    # Given: the check fixture suite (an oracle that fails, a tree already solved, no oracle).
    done = stack.cli("eval", "check", str(FIXTURES / "check"), "--remote", "--json", timeout_s=600)
    # Then: the worker's verdicts, one per task, as tests/integration/test_eval_check.py's.
    assert done.returncode == 1, done.stderr + stack.logs()
    verdicts = {r["task"]: (r["admitted"], r["reason"]) for r in json.loads(done.stdout)}
    assert verdicts == {
        "already-solved": (False, "the unsolved workspace already passes tests/test.sh"),
        "good": (True, "oracle passes, unsolved workspace fails"),
        "no-oracle": (False, "no solution/solve.sh: an oracle must show the task can be solved"),
        "oracle-fails": (False, "the oracle's workspace fails tests/test.sh (exit 1: no output)"),
    }
    assert "Task raas.eval_check[" in (stack.log_dir / "worker0.log").read_text()  # ran there
