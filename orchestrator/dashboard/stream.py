"""The dashboard's live streams (server-sent events).

A project's stream: each message carries events in seq order and its ``id:`` is the last one's
seq, so a browser that reconnects sends ``Last-Event-ID`` (or ``?after=``) and gets exactly what
it missed. The events come from ``orchestrator.queries.follow`` — the database's history, then
Redis live, gaps filled from the database (DESIGN.md rule 5) — run in a thread per connection.
Output chunks are coalesced (at most ``FLUSHES_PER_S`` messages a second); any other event
goes out at once. An idle stream gets a comment line every ``HEARTBEAT_S``.

The projects list's stream only says "changed" (at most once a second) when one of the
viewer's projects has a lifecycle event; the page then fetches its rows again.

A stream never ends by itself, and uvicorn's graceful shutdown waits for every open response: a
server stopping calls :meth:`Streams.close` first (``orchestrator.dashboard.close_streams``), which
ends each open stream at once (and any opened after), so the coordinator stops in its usual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated

import redis
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from orchestrator.api.deps import Context
from orchestrator.dashboard.sessions import COOKIE, session_holds
from orchestrator.dashboard.views import Ctx, ProjectSigned, Signed
from orchestrator.queries.follow import follow
from shared import events
from shared.db import session_scope
from shared.models import Project
from shared.schemas import EventOut

log = logging.getLogger(__name__)
router = APIRouter(prefix="/ui", include_in_schema=False)
FLUSHES_PER_S = 60
HEARTBEAT_S = 15.0
FOLLOW_IDLE_S = 5.0
LIST_CHANGES_PER_S = 1.0
NO_REDIS_REFRESH_S = 3.0
INT32_MAX = 2**31 - 1
# Events that move the projects list (status, iteration, spent): anything but the chatter.
CHATTY = frozenset({events.AGENT_OUTPUT_CHUNK, events.AGENT_TOOL_CALL, events.TOOL_EXECUTED})
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

Follower = Callable[[str, int, float], Iterator[EventOut]]


class Streams:
    """The open streams of one app, so that a server stopping can end them all at once."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._pumps: set[_Pump] = set()

    def add(self, pump: _Pump) -> None:
        with self._lock:
            if not self.closed.is_set():
                self._pumps.add(pump)
                return
        pump.end()

    def discard(self, pump: _Pump) -> None:
        with self._lock:
            self._pumps.discard(pump)

    def close(self) -> None:
        """End every open stream (each sends what it holds, then finishes) and any opened later."""
        with self._lock:
            self.closed.set()
            pumps, self._pumps = list(self._pumps), set()
        for pump in pumps:
            pump.end()


class _Pump:
    """A thread feeding a project's events (via ``follower``) into an asyncio queue; ``None`` in
    the queue says the stream is to end (the server is stopping)."""

    def __init__(self, follower: Follower, project_id: str, after: int) -> None:
        self.queue: asyncio.Queue[EventOut | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._stopped = threading.Event()
        self._follower, self._project_id, self._last = follower, project_id, after
        threading.Thread(target=self._run, name=f"sse-{project_id}", daemon=True).start()

    def _run(self) -> None:
        # follow() ends when idle or after a terminal event; start it again until the client goes.
        while not self._stopped.is_set():
            try:
                for event in self._follower(self._project_id, self._last, FOLLOW_IDLE_S):
                    self._last = event.seq
                    self._loop.call_soon_threadsafe(self.queue.put_nowait, event)
                    if self._stopped.is_set():
                        return
            except RuntimeError:  # the event loop closed under us: the server is going away
                return
            except Exception:
                log.warning(
                    "following %s for the dashboard failed; retrying", self._project_id, exc_info=True
                )
                self._stopped.wait(1.0)

    def stop(self) -> None:
        self._stopped.set()

    def end(self) -> None:
        """Stop following and tell the stream to finish (from any thread)."""
        self.stop()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is gone already
            self._loop.call_soon_threadsafe(self.queue.put_nowait, None)


def _message(batch: list[EventOut]) -> str:
    data = "[" + ",".join(event.model_dump_json() for event in batch) + "]"
    return f"id: {batch[-1].seq}\nevent: events\ndata: {data}\n\n"


async def event_messages(
    pump: _Pump, heartbeat_s: float = HEARTBEAT_S, holds: Callable[[], bool] | None = None
) -> AsyncIterator[str]:
    """SSE text: batches of events (output coalesced, the rest at once), heartbeats when idle.

    ``holds`` (asked every ``heartbeat_s``, in a thread): whether the viewer's session still
    holds; once it does not (signed out, idle), the stream ends and the browser's reconnection
    gets 401.
    """
    interval_s = 1.0 / FLUSHES_PER_S
    pending: list[EventOut] = []
    last_flush, ending, checked = 0.0, False, time.monotonic()
    try:
        yield "retry: 1000\n\n"
        while not ending:
            if holds is not None and time.monotonic() - checked >= heartbeat_s:
                checked = time.monotonic()
                if not await asyncio.to_thread(holds):
                    return
            timeout_s = heartbeat_s if not pending else max(0.0, last_flush + interval_s - time.monotonic())
            try:
                got = [await asyncio.wait_for(pump.queue.get(), timeout_s)]
                while not pump.queue.empty():
                    got.append(pump.queue.get_nowait())
            except TimeoutError:
                if not pending:
                    yield ": heartbeat\n\n"
                    continue
                got = []
            ending = None in got
            pending += [event for event in got if event is not None]
            urgent = any(event.type != events.AGENT_OUTPUT_CHUNK for event in pending)
            if pending and (ending or urgent or time.monotonic() - last_flush >= interval_s):
                yield _message(pending)
                pending, last_flush = [], time.monotonic()
    finally:
        pump.stop()


def _holds(request: Request, ctx: Context) -> Callable[[], bool]:
    cookie, cluster_token = request.cookies.get(COOKIE), ctx.settings.api_token.get_secret_value()
    return lambda: session_holds(cookie, cluster_token)


def _start_seq(after: int, last_event_id: str | None) -> int:
    """Where to resume: the later of ``?after=`` and the browser's Last-Event-ID."""
    try:
        resumed = int(last_event_id) if last_event_id else 0
    except ValueError:
        resumed = 0
    return max(after, min(max(resumed, 0), INT32_MAX))


def redis_follower(redis_url: str) -> Follower:
    def follower(project_id: str, after: int, idle_s: float) -> Iterator[EventOut]:
        return follow(redis_url, project_id, after, idle_timeout_s=idle_s)

    return follower


DB_POLL_S = 0.25


def database_follower(project_id: str, after: int, idle_s: float) -> Iterator[EventOut]:
    """Following without Redis (``raas run --ui``: its events never leave the process): the
    database has every event in seq order, so reading it after the last seq seen has no gap."""
    last, idle_since = after, time.monotonic()
    while time.monotonic() - idle_since < idle_s:
        with session_scope() as session:
            batch = events.history(session, project_id, last, limit=1000)
        for event in batch:
            last, idle_since = event.seq, time.monotonic()
            yield event
            if event.type in events.TERMINAL_EVENTS:
                return
        if not batch:
            time.sleep(DB_POLL_S)


@router.get("/projects/{project_id}/events")
async def project_stream(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    after: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> StreamingResponse:
    options = request.app.state.dashboard
    follower: Follower = options.follower or redis_follower(ctx.settings.redis_url)
    pump = _Pump(follower, project_id, _start_seq(after, last_event_id))
    streams: Streams = request.app.state.streams
    streams.add(pump)
    holds = _holds(request, ctx)

    async def messages() -> AsyncIterator[str]:
        try:
            async for message in event_messages(pump, options.heartbeat_s, holds):
                yield message
        finally:
            streams.discard(pump)

    return StreamingResponse(messages(), media_type="text/event-stream", headers=SSE_HEADERS)


class _ListWatch:
    """A thread on Redis (every project's channel) that flags a change to one of the viewer's
    projects; without Redis it flags one every few seconds (the page re-reads its rows)."""

    def __init__(self, redis_url: str | None, tenant_id: str | None) -> None:
        self.changed = threading.Event()
        self._stopped = threading.Event()
        self._redis_url, self._tenant_id = redis_url, tenant_id
        self._owners: dict[str, str | None] = {}
        threading.Thread(target=self._run, name="sse-projects", daemon=True).start()

    def _mine(self, project_id: str) -> bool:
        if self._tenant_id is None:
            return True
        if project_id not in self._owners:
            with session_scope() as session:
                self._owners[project_id] = session.scalar(
                    select(Project.tenant_id).where(Project.id == project_id)
                )
        return self._owners[project_id] == self._tenant_id

    def _run(self) -> None:
        if self._redis_url is None:  # an embedded run publishes nothing: say "changed" now and then
            while not self._stopped.wait(NO_REDIS_REFRESH_S):
                self.changed.set()
            return
        client = redis.Redis.from_url(self._redis_url)
        while not self._stopped.is_set():
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(events.channel("*"))
                while not self._stopped.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    event = events.decode(message["data"])
                    if event.type not in CHATTY and self._mine(event.project_id):
                        self.changed.set()
            except redis.RedisError:
                self.changed.set()
                self._stopped.wait(3.0)
            except Exception:
                log.warning("watching projects for the dashboard failed; retrying", exc_info=True)
                self._stopped.wait(1.0)
        with contextlib.suppress(redis.RedisError):
            client.close()

    def stop(self) -> None:
        self._stopped.set()


async def list_messages(
    watch: _ListWatch, closed: threading.Event | None = None, holds: Callable[[], bool] | None = None
) -> AsyncIterator[str]:
    """SSE text: "changed" when the watch says so, heartbeats when quiet; ends once ``closed``
    is set or, asked every ``HEARTBEAT_S``, the session no longer ``holds``."""
    quiet_s, checked = 0.0, time.monotonic()
    try:
        yield "retry: 1000\n\n"
        while closed is None or not closed.is_set():
            await asyncio.sleep(1.0 / LIST_CHANGES_PER_S)
            if holds is not None and time.monotonic() - checked >= HEARTBEAT_S:
                checked = time.monotonic()
                if not await asyncio.to_thread(holds):
                    return
            if watch.changed.is_set():
                watch.changed.clear()
                quiet_s = 0.0
                yield f"event: changed\ndata: {json.dumps(time.time())}\n\n"
            else:
                quiet_s += 1.0 / LIST_CHANGES_PER_S
                if quiet_s >= HEARTBEAT_S:
                    quiet_s = 0.0
                    yield ": heartbeat\n\n"
    finally:
        watch.stop()


@router.get("/projects-stream")
async def projects_stream(request: Request, ctx: Ctx, session: Signed) -> StreamingResponse:
    # A dashboard given its own follower (raas run --ui) has no Redis to watch.
    redis_url = None if request.app.state.dashboard.follower else ctx.settings.redis_url
    watch = _ListWatch(redis_url, session.principal.tenant_id)
    messages = list_messages(watch, request.app.state.streams.closed, _holds(request, ctx))
    return StreamingResponse(messages, media_type="text/event-stream", headers=SSE_HEADERS)
