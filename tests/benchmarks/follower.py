"""A live follower in the benchmark's own process: one Redis pub/sub connection, like
``raas follow``'s, on every project's channel and on the raw baseline's channel.

It notes when each message arrived (for delivery latency) and how far each project has got
(for the benchmark to pause projects at a given iteration and to know when they are quiet).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.events import channel
from tests.benchmarks import rig

RAW_CHANNEL = "raas:bench:raw"
# The raw messages each written to Postgres before they are published, as an event is.
RAW_COMMITTED_CHANNEL = "raas:bench:raw-committed"
RAW_CHANNELS = (RAW_CHANNEL, RAW_COMMITTED_CHANNEL)


@dataclass
class Follower:
    redis_url: str
    received: list[tuple[float, bytes, bytes]] = field(default_factory=list)
    started: dict[str, int] = field(default_factory=dict)  # project → latest iteration started
    ended: dict[str, int] = field(default_factory=dict)  # project → latest iteration ended
    paused: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, project_ids: list[str]) -> None:
        """Subscribe to the projects' channels (all at once: a PubSub is not thread-safe) and listen."""
        pubsub = redis.Redis.from_url(self.redis_url).pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(*RAW_CHANNELS, *(channel(p) for p in project_ids))
        self._thread = threading.Thread(target=self._listen, args=(pubsub,), name="follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _listen(self, pubsub: Any) -> None:
        raw_channels = {name.encode() for name in RAW_CHANNELS}
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            self.received.append((time.time(), message["channel"], message["data"]))
            if message["channel"] not in raw_channels:
                self._track(json.loads(message["data"]))
        pubsub.close()

    def _track(self, event: dict[str, Any]) -> None:
        project, kind = event["project_id"], event["type"]
        if kind == "iteration_started":
            self.started[project] = max(self.started.get(project, 0), event["data"]["number"])
        elif kind in ("iteration_complete", "iteration_error"):
            self.ended[project] = max(self.ended.get(project, 0), event["data"]["number"])
        elif kind == "project_paused":
            self.paused.add(project)
        elif kind == "project_resumed":
            self.paused.discard(project)

    def settled(self, project_ids: list[str]) -> bool:
        """Every project paused, and its last iteration ended."""
        return all(p in self.paused and self.ended.get(p, 0) >= self.started.get(p, 0) for p in project_ids)

    def latencies(self, until: float) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """Seconds from ``ts`` to receipt of what arrived before ``until``: the projects' events
        by type, and the raw messages by channel."""
        ours: dict[str, list[float]] = defaultdict(list)
        base: dict[str, list[float]] = {name: [] for name in RAW_CHANNELS}
        for received, chan, data in self.received:
            if received > until:
                break
            body = json.loads(data)
            if chan.decode() in base:
                base[chan.decode()].append(received - body["ts"])
            else:
                ours[body["type"]].append(received - rig.parse_ts(body["ts"]))
        return ours, base

    def counts(self) -> dict[str, int]:
        """Events received, per project."""
        counts: dict[str, int] = defaultdict(int)
        prefix = channel("").encode()
        for _, chan, _ in self.received:
            if chan.startswith(prefix):
                counts[chan[len(prefix) :].decode()] += 1
        return counts
