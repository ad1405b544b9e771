"""The LLM gateway's added latency per call, against calling the scripted model directly, both
measured in this run: p50 and p99 of a streamed call read to its end.

Through the gateway a call also reserves its worst case in Postgres before it goes upstream (one
statement), and is recorded (two message rows) and settled after its answer's last byte, while
the next call waits on the model; the goal (p50 <= 1.1x) holds a call against a model that takes
time to answer, as a real one does (``--model-latency-s``, the scripted model's wait before the
first byte, default 0.2 s). ``--model-latency-s 0`` shows the gateway's own cost against a model
that answers at once. The checks read Postgres once the lease is closed: every call recorded
and charged once, nothing left reserved but the iteration's own first hold.

Run: ``.venv/bin/python -m tests.benchmarks.bench_gateway [--calls N] [--model-latency-s S]``.
Needs Postgres and Redis; it makes its own database (dropped at the end).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import SecretStr

from tests.benchmarks import rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.engine import engine
from tests.support.records import messages, project
from workers.claim import claim_iteration
from workers.gateway import Gateway


def body(session: str) -> dict[str, object]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1000,
        "stream": True,
        "messages": [{"role": "user", "content": "Do the task."}],
        "metadata": {"user_id": session},
    }


def timed(calls: int, one: Callable[[], int]) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        status = one()
        samples.append((time.perf_counter() - started) * 1000)
        assert status == 200, f"a call answered {status}"
    return samples


def p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def measure(args: argparse.Namespace, tmp: Path) -> Table:
    script = {
        "responses": [
            {"content": [{"type": "text", "text": "done " * 50}], "latency_s": args.model_latency_s}
        ],
        "when_exhausted": "repeat_last",
    }
    table = Table()
    with engine(script, tmp) as eng:
        # Every call one turn of one lease: the turn cap above the calls made.
        project_id = eng.submit(raas_toml=f"max_turns = {args.calls + 10}\n[budget]\nlimit_usd = 1000\n")
        iteration_id = eng.dispatcher.take(project_id)
        assert iteration_id is not None
        claim = claim_iteration(iteration_id, "bench-gateway", stale_after_s=300)
        assert claim is not None
        settings = eng.settings.model_copy(update={"anthropic_api_key": SecretStr("sk-bench-key")})
        gateway = Gateway(settings, limiter=None, publish=None)
        try:
            with gateway.open(claim, lambda event: None) as lease:
                transport = httpx.HTTPTransport(uds=str(lease.socket_path))
                with (
                    httpx.Client(base_url=eng.model.base_url) as direct,
                    httpx.Client(transport=transport, base_url="http://localhost") as gated,
                ):

                    def raw() -> int:
                        response = direct.post("/v1/messages", json=body("bench-direct"))
                        return response.status_code

                    def ours() -> int:
                        response = gated.post(
                            "/v1/messages", json=body(project_id), headers={"x-api-key": lease.token}
                        )
                        return response.status_code

                    timed(3, raw)  # warm both paths
                    timed(3, ours)
                    baseline, through = [], []
                    for _ in range(args.calls // 10 or 1):  # interleaved, so drift hits both alike
                        baseline += timed(10, raw)
                        through += timed(10, ours)
                stats = lease.stats()
            own_hold = lease.gate.ledger.own_hold  # the iteration's own, given back when it ends
        finally:
            gateway.close()
        recorded = [row for row in messages(project_id) if row.role == "assistant"]
        ledger = project(project_id)
    name = f"streamed call, model latency {args.model_latency_s:g} s"
    for q in (50, 99):
        table.figures.append(
            Figure(
                f"{name}: p{q}",
                p(through, q),
                p(baseline, q),
                "ms",
                "the scripted model called directly",
                goal_max=1.1 if q == 50 else None,
            )
        )
    calls = len(through) + 3
    once = stats.calls == len(recorded) == calls and ledger.spent_usd == sum(r.cost_usd for r in recorded)
    table.checks.append(Check("every gated call charged once", once, f"{len(recorded)} calls recorded"))
    table.checks.append(
        Check(
            "nothing left reserved by the calls",
            ledger.reserved_usd == own_hold,
            f"reserved {ledger.reserved_usd} USD, the iteration's own hold {own_hold} USD",
        )
    )
    added = statistics.median(through) - statistics.median(baseline)
    table.checks.append(Check("added latency (p50, ms)", True, f"{added:.1f} ms per call"))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="calls on each path (multiple of 10)")
    parser.add_argument(
        "--model-latency-s", type=float, default=0.2, help="the model's wait before answering"
    )
    args = parser.parse_args()
    with rig.services(), tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        table = measure(args, Path(tmp))
    table.print()
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
