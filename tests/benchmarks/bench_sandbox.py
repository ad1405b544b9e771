"""Sandbox costs as ratios against raw Docker, both measured in this run (median of N).

Ours talks to the engine through the Docker SDK over one open connection, so the goals are set
against the SDK doing the bare minimum in the same run (``containers.run`` of ``true``,
``exec_run``); the ``docker`` CLI, which also pays a process start per sample, is printed
beside them for the record.

Run: ``.venv/bin/python -m tests.benchmarks.bench_sandbox [--n N] [--output-mb MB]``. Needs a
Docker engine and the sandbox image (deploy/sandbox/build-offline.sh). Every container it makes
is labelled and removed.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import DockerSandbox

IMAGE = os.environ.get("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
RUN_ID = secrets.token_hex(4)
LABELS = {"raas.bench": RUN_ID}


@dataclass
class Figure:
    name: str
    ours_ms: float
    baseline_ms: float
    baseline: str
    goal: float | None

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.baseline_ms

    def row(self) -> str:
        goal = f"<= {self.goal:g}x" if self.goal is not None else "-"
        met = "-" if self.goal is None else ("met" if self.ratio <= self.goal else "NOT MET")
        return (
            f"{self.name:<40} {self.ours_ms:>9.2f} {self.baseline_ms:>9.2f}  {self.baseline:<34} "
            f"{self.ratio:>7.3f}x  {goal:<9} {met}"
        )


def median_ms(action: Callable[[], object], n: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        action()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def docker_cli(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True)


class Bench:
    def __init__(self, client: docker.DockerClient, workdir: Path, n: int, output_mb: int = 1000) -> None:
        self.client = client
        self.workdir = workdir
        self.n = n
        self.output_mb = output_mb
        self.run_sdk_ms = 0.0  # the SDK's containers.run of `true`, measured by lifecycle()

    def start_sandbox(self) -> DockerSandbox:
        workspace = Path(tempfile.mkdtemp(dir=self.workdir))
        return DockerSandbox.start(
            image=IMAGE,
            host_workspace=workspace,
            limits=SandboxLimits(),
            labels=LABELS,
            name=f"raas-bench-{RUN_ID}-{secrets.token_hex(4)}",
            client=self.client,
        )

    def lifecycle(self) -> list[Figure]:
        ours = median_ms(lambda: self.start_sandbox().close(), self.n)
        self.run_sdk_ms = median_ms(
            lambda: self.client.containers.run(IMAGE, "true", remove=True, labels=LABELS), self.n
        )
        cli = median_ms(
            lambda: docker_cli("run", "--rm", "--label", f"raas.bench={RUN_ID}", IMAGE, "true"), self.n
        )
        name = "container lifecycle (start+helper+close)"
        return [
            Figure(name, ours, self.run_sdk_ms, "SDK containers.run(IMAGE, true)", 1.2),
            Figure(name, ours, cli, "docker run --rm IMAGE true", None),
        ]

    def pool_wait(self) -> Figure | None:
        try:
            from workers.sandbox.pool import SandboxPool
        except ImportError:
            return None
        pool = SandboxPool(
            size=2,
            image=IMAGE,
            limits=SandboxLimits(),
            labels=LABELS,
            client=self.client,
            name_prefix=f"raas-bench-{RUN_ID}",
            scratch_dir=self.workdir / "pool",
        )
        try:
            ours_samples = []
            for _ in range(self.n):
                pool.wait_until_full(timeout_s=30)
                started = time.perf_counter()
                sandbox = pool.acquire()
                ours_samples.append((time.perf_counter() - started) * 1000)
                sandbox.close()
        finally:
            pool.close()
        return Figure(
            "sandbox wait with warm pool",
            statistics.median(ours_samples),
            self.run_sdk_ms,
            "SDK containers.run(IMAGE, true)",
            0.2,
        )

    def calls(self) -> list[Figure]:
        sandbox = self.start_sandbox()
        try:
            sandbox.write_file("small.txt", b"hello, sandbox\n" * 10)
            name, reps = sandbox.name, self.n * 10
            container = self.client.containers.get(sandbox.container_id)
            read = median_ms(lambda: sandbox.read_file("small.txt"), reps)
            echo = median_ms(lambda: sandbox.run("echo hi"), reps)
            read_cli = median_ms(lambda: docker_cli("exec", name, "cat", "/workspace/small.txt"), self.n)
            echo_cli = median_ms(lambda: docker_cli("exec", name, "echo", "hi"), self.n)
            read_sdk = median_ms(lambda: container.exec_run(["cat", "/workspace/small.txt"]), self.n)
            echo_sdk = median_ms(lambda: container.exec_run(["echo", "hi"]), self.n)
        finally:
            sandbox.close()
        return [
            Figure("read small file via helper", read, read_sdk, "SDK exec_run(cat FILE)", 0.05),
            Figure("read small file via helper", read, read_cli, "docker exec C cat FILE", None),
            Figure("bash `echo hi` via helper", echo, echo_sdk, "SDK exec_run(echo hi)", 0.1),
            Figure("bash `echo hi` via helper", echo, echo_cli, "docker exec C echo hi", None),
        ]

    def big_output(self) -> Figure:
        """A command printing ``output_mb`` MB: ours keeps head and tail, the SDK streams it all."""
        command = f"head -c {self.output_mb * 1_000_000} /dev/zero | tr '\\0' 'x'"
        sandbox = self.start_sandbox()
        try:
            container = self.client.containers.get(sandbox.container_id)

            def stream_all() -> None:
                for _ in container.exec_run(["sh", "-c", command], stream=True).output:
                    pass

            samples = max(3, self.n // 3)
            ours = median_ms(lambda: sandbox.run(command), samples, warmup=0)
            raw = median_ms(stream_all, samples, warmup=0)
        finally:
            sandbox.close()
        return Figure(
            f"{self.output_mb} MB of output, capped (bash)", ours, raw, "SDK exec_run, stream read", None
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10, help="repetitions per figure (calls: 10x that)")
    parser.add_argument("--output-mb", type=int, default=1000, help="size of the big-output figure's output")
    args = parser.parse_args()
    n = args.n
    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        print(f"sandbox image {IMAGE} is missing; run deploy/sandbox/build-offline.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="raas-bench-") as workdir:
        bench = Bench(client, Path(workdir), n, args.output_mb)
        try:
            figures = [
                *bench.lifecycle(),
                *filter(None, [bench.pool_wait()]),
                *bench.calls(),
                bench.big_output(),
            ]
        finally:
            for container in client.containers.list(all=True, filters={"label": f"raas.bench={RUN_ID}"}):
                container.remove(force=True)
    print(
        f"sandbox benchmark, image {IMAGE}, median of {n} (calls: {n * 10}, big output: {max(3, n // 3)}) "
        "per figure"
    )
    header = (
        f"{'figure':<40} {'ours ms':>9} {'base ms':>9}  {'baseline':<34} {'ratio':>8}  {'goal':<9} result"
    )
    print(header)
    print("-" * len(header))
    for figure in figures:
        print(figure.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
