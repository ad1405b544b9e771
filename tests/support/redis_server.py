"""A Redis server of one run's own, on a free loopback port.

Celery queues have fixed names, and a run flushes its database at both ends: two runs on one
shared Redis would take each other's task messages and drop each other's queues (two
benchmarks at once did exactly that). A private server rules it out.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.loopback import listening_process


@contextmanager
def private_redis(start_within_s: float = 10.0) -> Iterator[str]:
    """A throwaway ``redis-server`` (nothing saved to disk) while the block runs; its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        msg = "redis-server is not installed: run `bash scripts/setup.sh`"
        raise RuntimeError(msg)
    with listening_process(
        lambda port: [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        "see redis-server's own output by running it by hand",
        start_within_s,
    ) as (port, _proc):
        yield f"redis://127.0.0.1:{port}/0"
