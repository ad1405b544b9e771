"""A Redis server of one run's own, on a free loopback port.

Celery queues have fixed names, and a run flushes its database at both ends: two runs on one
shared Redis would take each other's task messages and drop each other's queues (two
benchmarks at once did exactly that). A private server rules it out.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def private_redis(start_within_s: float = 10.0) -> Iterator[str]:
    """A throwaway ``redis-server`` (nothing saved to disk) while the block runs; its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        msg = "redis-server is not installed: run `bash scripts/setup.sh`"
        raise RuntimeError(msg)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + start_within_s
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = f"redis-server on port {port} did not start"
                raise RuntimeError(msg)
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
