"""The dashboard under load: event delivery to its SSE clients against a raw Redis publish →
receive measured in the same run, and the Postgres rows one projects-list page reads as the
number of projects grows.

1. Delivery: ``--projects`` projects are "running": ``--emitters`` processes write their events
   the way the product does (``shared.events.emit``: the row in Postgres, then the Redis
   publish), ``--rate`` events a second per project, lifecycle events (delivered at once, not
   coalesced). The dashboard (the coordinator's app with the dashboard mounted) runs in its own
   process; ``--watched`` SSE clients, signed in, follow one project each and take every event's
   delay from its ``ts`` (stamped when its row was written) to its receipt. Meanwhile a raw
   publisher process sends messages of the same size with their send time to a raw subscriber
   in this process. Goal: p99 of ours <= 5x the raw p99. Checked: every watched stream gapless
   with no repeat.
2. Rows per page: ``--list-projects`` projects of one tenant (and as many of another), created
   in two steps (a tenth, then the rest); the Postgres rows one page view reads (EXPLAIN ANALYZE
   of the page's statements: rows returned plus rows filtered out, by every scan) at both sizes.
   Goal: the same at both (ratio <= 1.5).

Run: ``.venv/bin/python -m tests.benchmarks.bench_dashboard [--projects 200] [--seconds 20]``;
a quick run: ``--projects 40 --seconds 8 --list-projects 1000``. Needs Postgres and Redis; it
makes its own database (dropped at the end) and a Redis server of its own (stopped at the end).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
from datetime import timedelta
from typing import Any

import httpx
import redis
from sqlalchemy import insert
from sqlalchemy.dialects import postgresql

from tests.benchmarks import raw, rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.loopback import free_port
from tests.support.stack import wait_http

RAW_CHANNEL = "bench:dashboard:raw"


def _serve(port: int) -> None:
    """The dashboard's process: the coordinator's app (API + dashboard) on loopback."""
    import uvicorn

    from orchestrator.api import create_app
    from orchestrator.dashboard import DashboardOptions, mount_dashboard
    from shared.events import RedisBus
    from shared.settings import get_settings
    from tests.support.engine import RecordingDispatcher

    settings = get_settings()
    app = mount_dashboard(
        create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)), DashboardOptions()
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _emit(project_ids: list[str], rate: float, seconds: float) -> None:
    """Write and publish events for ``project_ids``, ``rate`` a second each, as the product does."""
    from shared import events
    from shared.event_payloads import ProjectStarted
    from shared.events import RedisBus
    from shared.settings import get_settings

    bus = RedisBus(get_settings().redis_url)
    interval_s = 1.0 / (rate * len(project_ids))
    deadline = time.monotonic() + seconds
    index = 0
    while time.monotonic() < deadline:
        events.emit(bus, project_ids[index % len(project_ids)], ProjectStarted(workflow="ralph"))
        index += 1
        time.sleep(interval_s)


def _make_projects(count: int, tenant_id: str | None, prefix: str) -> list[str]:
    from shared.db import session_scope
    from shared.models import Project, new_id, utcnow

    ids = [new_id() for _ in range(count)]
    start = utcnow()
    rows: list[dict[str, Any]] = [
        {
            "id": pid,
            "name": f"{prefix}-{i}",
            "prompt": "x",
            "config": {},
            "tenant_id": tenant_id,
            "created_at": start + timedelta(microseconds=i),
        }
        for i, pid in enumerate(ids)
    ]
    with session_scope() as session:
        session.execute(insert(Project), rows)
    return ids


class SseClient(threading.Thread):
    """Follows one project's stream; keeps each event's seq and its delay since its ``ts``."""

    def __init__(self, url: str, cookie: dict[str, str], project_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.cookie, self.project_id = url, cookie, project_id
        self.delays: list[float] = []
        self.seqs: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with (
            httpx.Client(base_url=self.url, cookies=self.cookie, timeout=None) as client,
            client.stream("GET", f"/ui/projects/{self.project_id}/events") as response,
        ):
            for line in response.iter_lines():
                if self.stop.is_set():
                    return
                if line.startswith("data: "):
                    now = time.time()
                    for event in json.loads(line[6:]):
                        self.seqs.append(event["seq"])
                        self.delays.append(now - rig.parse_ts(event["ts"]))


class RawReceiver(threading.Thread):
    """The raw baseline's subscriber: each message's delay since the send time it carries."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(RAW_CHANNEL)  # before the publisher starts
        self.delays: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.pubsub.get_message(timeout=0.5)
            if message is not None:
                self.delays.append(time.time() - json.loads(message["data"])["ts"])
        self.pubsub.close()
        self.client.close()


def delivery(svc: rig.Services, args: argparse.Namespace, table: Table) -> None:
    from shared.settings import get_settings

    project_ids = _make_projects(args.projects, None, "running")
    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    server = spawn.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz")
    signed = httpx.post(
        f"{url}/login", data={"token": get_settings().api_token.get_secret_value(), "next": "/"}
    )
    cookie = dict(signed.cookies)
    clients = [SseClient(url, cookie, pid) for pid in project_ids[: args.watched]]
    for client in clients:
        client.start()
    receiver = RawReceiver(svc.redis_url)
    receiver.start()
    time.sleep(1.0)  # the streams are open and subscribed
    shares = [project_ids[i :: args.emitters] for i in range(args.emitters)]
    emitters = [spawn.Process(target=_emit, args=(share, args.rate, args.seconds)) for share in shares]
    total_rate = args.rate * args.projects
    count = int(args.seconds * 10 * args.watched)
    publisher = spawn.Process(
        target=raw.publish, args=(svc.redis_url, RAW_CHANNEL, 1.0 / (10 * args.watched), count)
    )
    for proc in [*emitters, publisher]:
        proc.start()
    for proc in [*emitters, publisher]:
        proc.join()
    time.sleep(3.0)  # the last events reach the clients
    receiver.stop.set()
    for client in clients:
        client.stop.set()
    server.terminate()
    server.join(10)
    ours = [d for c in clients for d in c.delays[1:]]  # the first message carries history
    pct = rig.percentile
    table.figures += [
        Figure(
            "SSE delivery p50", pct(ours, 50) * 1000, pct(receiver.delays, 50) * 1000, "ms", "raw publish p50"
        ),
        Figure(
            "SSE delivery p99",
            pct(ours, 99) * 1000,
            pct(receiver.delays, 99) * 1000,
            "ms",
            "raw publish p99",
            5.0,
        ),
    ]
    gapless = all(c.seqs == list(range(1, len(c.seqs) + 1)) and c.seqs for c in clients)
    with svc.pg() as conn:
        row = conn.execute("SELECT sum(last_event_seq) FROM projects WHERE name LIKE 'running-%'").fetchone()
    written = int(row[0] or 0) if row else 0
    detail = (
        f"{len(clients)} streams, {sum(len(c.seqs) for c in clients)} events; {written / args.seconds:.0f} "
        f"events/s written of the {total_rate:g} asked"
    )
    table.checks.append(Check("every watched stream gapless, no repeat", gapless, detail))


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows every scan of an EXPLAIN ANALYZE plan looked at: returned plus filtered out."""
    rows = 0
    if "Scan" in plan.get("Node Type", ""):
        loops = plan.get("Actual Loops", 1)
        rows += int((plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops)
    for child in plan.get("Plans", []):
        rows += _rows_read(child)
    return rows


def _page_rows(svc: rig.Services, tenant_id: str) -> int:
    from orchestrator.queries.listing import PAGE_SIZE, page_query

    query = page_query(tenant_id=tenant_id, status=None, after=None, page_size=PAGE_SIZE)
    sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    with svc.pg() as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}").fetchone()
    assert plan is not None
    return _rows_read(plan[0][0]["Plan"])


def rows_per_page(svc: rig.Services, args: argparse.Namespace, table: Table) -> None:
    from orchestrator.api.tenants import authenticate, create_tenant

    _, token = create_tenant("bench-list")
    tenant_id = str(authenticate(token, "-").tenant_id)
    other_id = str(authenticate(create_tenant("bench-other")[1], "-").tenant_id)
    first = args.list_projects // 10
    _make_projects(first, tenant_id, "listed")
    _make_projects(first, other_id, "other")
    with svc.pg() as conn:
        conn.execute("ANALYZE projects")
    small = _page_rows(svc, tenant_id)
    _make_projects(args.list_projects - first, tenant_id, "listed")
    _make_projects(args.list_projects - first, other_id, "other")
    with svc.pg() as conn:
        conn.execute("ANALYZE projects")
    large = _page_rows(svc, tenant_id)
    table.figures.append(
        Figure(
            f"rows read per page, {args.list_projects} projects",
            large,
            small,
            "rows",
            f"with {first} projects",
            1.5,
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--projects", type=int, default=200, help="projects whose events are written at once")
    parser.add_argument("--rate", type=float, default=1.0, help="events a second per project")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the load runs")
    parser.add_argument("--watched", type=int, default=5, help="SSE clients, one project each")
    parser.add_argument("--emitters", type=int, default=2, help="processes writing the events")
    parser.add_argument(
        "--list-projects", type=int, default=1000, help="projects for the rows-per-page check"
    )
    args = parser.parse_args()
    table = Table()
    with rig.services() as svc:
        delivery(svc, args, table)
        rows_per_page(svc, args, table)
    print(f"bench_dashboard on {rig.machine()}: {vars(args)}")
    table.print()
    return 0 if table.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
