"""Trigger webhooks under load (issue #24): accept latency against a raw POST, and a burst of
signed deliveries with duplicates.

1. Latency: the coordinator's app (uvicorn on loopback, one process) takes signed GitHub
   ``issues.labeled`` deliveries at ``POST /v1/hooks/{trigger}`` (signature over the raw bytes,
   parse, filter, one INSERT .. ON CONFLICT, the launch after the commit) and, in the same app
   and run, ``POST /raw``, which only writes one row of the same table. Requests alternate, one at
   a time. Goal: p99 of the hook <= 2x the raw p99.
2. Burst: ``--burst`` signed deliveries, 10% of them repeating an earlier delivery id, from 16
   threads at once. Checked: runs created = distinct deliveries, none lost, each launched once.

The launcher records instead of sending to the broker (the raw route sends nothing either).
Run: ``.venv/bin/python -m tests.benchmarks.bench_triggers [--requests 500] [--burst 1000]``.
Needs Postgres; it makes its own database (dropped at the end).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from cryptography.fernet import Fernet
from fastapi import Request
from pydantic import SecretStr
from sqlalchemy import func, select

from orchestrator.api import create_app
from orchestrator.triggers import store
from orchestrator.triggers.intake import insert_run
from shared.db import session_scope
from shared.events import NullBus
from shared.models import TriggerRun, new_id
from shared.settings import get_settings
from shared.triggers import TriggerSpec
from tests.benchmarks import rig
from tests.support.coordinator import RecordingDispatcher
from tests.support.dashboard import Server
from tests.support.triggers import SECRET, RecordingLauncher, labeled_issue, sign


def _delivery(http: httpx.Client, trigger_id: str, delivery: str, number: int) -> httpx.Response:
    body = json.dumps(labeled_issue(number, "raas")).encode()
    headers = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(body),
        "Content-Type": "application/json",
    }
    return http.post(f"/v1/hooks/{trigger_id}", content=body, headers=headers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--burst", type=int, default=1000)
    args = parser.parse_args()
    with rig.services():
        settings = get_settings().model_copy(update={"secret_key": SecretStr(Fernet.generate_key().decode())})
        spec = TriggerSpec.model_validate(
            {
                "name": "bench",
                "source": "github",
                "secret": SECRET,
                "filter": {"events": ["issue_labeled"], "labels": ["raas"]},
                "template": {"repo": "https://github.example/alice/app", "prompt": "Fix {{ issue.title }}"},
            }
        )
        trigger_id = store.add_trigger(spec, None, settings).id
        app = create_app(settings, RecordingDispatcher(), NullBus())
        launcher = RecordingLauncher()
        app.state.trigger_launcher = launcher

        @app.post("/raw")
        async def raw(request: Request) -> dict[str, str | None]:
            await request.body()
            with session_scope() as session:
                return {"run": insert_run(session, trigger_id, new_id(), None, {})}

        server = Server(app)
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                hook_ms, raw_ms = [], []
                for i in range(args.requests):
                    started = time.perf_counter()
                    assert _delivery(http, trigger_id, f"lat-{i}", i).status_code == 202
                    hook_ms.append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    assert http.post("/raw", content=b"{}").status_code == 200
                    raw_ms.append((time.perf_counter() - started) * 1000)
                launched_before = len(launcher.launched)
                ids = [f"burst-{i}" for i in range(args.burst - args.burst // 10)]
                ids += ids[: args.burst // 10]  # 10% duplicates, sent in the same burst
                with ThreadPoolExecutor(16) as pool:
                    answers = list(
                        pool.map(
                            lambda n: _delivery(http, trigger_id, ids[n], n).status_code, range(len(ids))
                        )
                    )
        finally:
            server.stop()
        with session_scope() as session:
            burst_rows = session.scalar(
                select(func.count()).select_from(TriggerRun).where(TriggerRun.key.like("burst-%"))
            )
        distinct = len(set(ids))
        p99_hook, p99_raw = rig.percentile(hook_ms, 99), rig.percentile(raw_ms, 99)
        print(f"machine: {rig.machine()}")
        print(
            f"accept latency p50 hook {rig.median(hook_ms):.2f} ms, raw {rig.median(raw_ms):.2f} ms; "
            f"p99 hook {p99_hook:.2f} ms, raw {p99_raw:.2f} ms; "
            f"ratio p99 {p99_hook / p99_raw:.2f}x (goal <= 2x)"
        )
        launched = len(launcher.launched) - launched_before
        print(
            f"burst: {len(ids)} deliveries ({distinct} distinct), answers {sorted(set(answers))}; "
            f"runs created {burst_rows}, launched {launched}: "
            f"{'OK' if burst_rows == distinct == launched else 'FAILED'}"
        )


if __name__ == "__main__":
    main()
