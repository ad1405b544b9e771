"""The soak's own services, each of which the scheduler can break and bring back.

The soak restarts Postgres, Redis and (optionally) Docker, so nothing it breaks may be shared with
anything else on the machine: it initialises a PostgreSQL cluster of its own and runs a Redis
server of its own, both on free loopback ports (the fault tests' :class:`PrivatePostgres` and
:class:`PrivateRedis`). Docker: the machine's engine is shared, so breaking it has three modes:

- ``private`` (the default): the soak runs a ``dockerd`` of its own (:class:`PrivateDockerd`: own
  data root, exec root and containerd, socket in the soak's directory) with the sandbox image
  loaded into it, and restarts it for real (SIGTERM: it stops its containers and exits; then
  started again and awaited with ``docker info``). Nothing else on the machine notices.
- ``cut``: the workers reach the engine through a Unix-socket proxy
  (:class:`DockerSocketProxy`) that is closed for a few seconds, every open connection aborted;
  the engine itself never notices.
- ``restart``: the machine's ``dockerd`` is stopped (SIGTERM, as a service manager would) and
  started again the way ``scripts/setup.sh`` starts it, then awaited with ``docker info``. Every
  container on the machine stops with it: only when the soak runs alone.

With ``store="s3"`` the workspaces live in an S3 API server (``moto_server``) reached through a
loopback TCP proxy (:class:`tests.support.proxies.TcpProxy`) whose cut is the object store's
fault (moto keeps its objects in memory, so restarting it would be losing a durable store,
which no real one does).
With ``replicas=2`` two coordinators run behind HAProxy (:mod:`tests.support.replicas`), which
the clients and workers use.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from orchestrator.workspaces.objects import Bucket, Location
from orchestrator.workspaces.s3 import S3Store
from shared.settings import get_settings
from tests.support.faults import (
    PG_BIN,
    DockerSocketProxy,
    PrivatePostgres,
    PrivateRedis,
    wait_until,
)
from tests.support.loopback import free_port
from tests.support.object_store import CREDENTIALS, ObjectStoreServer
from tests.support.proxies import TcpProxy
from tests.support.replicas import Haproxy
from tests.support.stack import wait_http

DOCKERD_PIDFILE = Path("/var/run/docker.pid")
DOCKERD_LOG = Path("/var/log/raas-dockerd.log")  # where scripts/setup.sh starts it
S3_BUCKET = "raas-chaos"


@dataclass
class PrivateDockerd:
    """A Docker engine of the soak's own: its own data and exec roots (so its own containerd),
    socket, pid file and network namespace, no bridge and no iptables rules (sandboxes have no
    network), the sandbox image loaded into it from the machine's engine. Restarting it touches
    nothing else."""

    root: Path
    image: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "dockerd.log").open("ab") as log:
            self.proc = subprocess.Popen(
                # In a network namespace of its own: a dockerd started with --bridge=none deletes
                # the docker0 device of its namespace, which here would be the machine engine's.
                ["unshare", "--net", "dockerd", "--data-root", str(self.root / "data"),
                 "--exec-root", str(self.root / "x"),
                 "--pidfile", str(self.root / "docker.pid"), "-H", self.docker_host, "--bridge=none",
                 "--iptables=false", "--ip-masq=false", "--ip-forward=false"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: _docker_answers(self.docker_host), 90, "the soak's dockerd to answer", 0.5)

    def load_image(self) -> None:
        """Copy the sandbox image from the machine's engine (``docker save | docker load``)."""
        with subprocess.Popen(["docker", "save", self.image], stdout=subprocess.PIPE) as saved:
            loaded = subprocess.run(
                ["docker", "load"], stdin=saved.stdout, env={**os.environ, "DOCKER_HOST": self.docker_host},
                capture_output=True, timeout=600, check=False,
            )  # fmt: skip
        if saved.returncode or loaded.returncode:
            msg = f"loading {self.image} into the soak's dockerd failed: {loaded.stderr.decode().strip()}"
            raise RuntimeError(msg)

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it: it stops its containers and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


def restart_dockerd(down_s: float) -> None:
    """Stop the machine's dockerd, wait ``down_s``, start it as scripts/setup.sh does, and wait
    until ``docker info`` answers (its containers do not survive: live-restore is off)."""
    pid = int(DOCKERD_PIDFILE.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 90, "dockerd to stop", 0.2)
    time.sleep(down_s)
    with DOCKERD_LOG.open("ab") as log:
        subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_until(lambda: _docker_answers(None), 90, "dockerd to answer again", 0.5)


def _docker_answers(docker_host: str | None) -> bool:
    env = {**os.environ, "DOCKER_HOST": docker_host} if docker_host else None
    done = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30, env=env)
    return done.returncode == 0


@dataclass
class Services:
    """Postgres, Redis, the Docker path, the object store and the load balancer of one soak."""

    root: Path
    docker_mode: str = "private"
    store: str = "local"
    replicas: int = 1
    postgres: PrivatePostgres | None = None
    redis: PrivateRedis | None = None
    docker_proxy: DockerSocketProxy | None = None
    dockerd: PrivateDockerd | None = None
    s3_gate: TcpProxy | None = None
    s3: ObjectStoreServer | None = None  # as its clients reach it: through the gate a fault cuts
    coordinator_ports: list[int] = field(default_factory=list)
    balancer: Haproxy | None = None
    balancer_port: int | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        """Everything but the balancer, which needs the coordinators (:meth:`start_balancer`)."""
        if PG_BIN is None:
            msg = "no PostgreSQL server binaries under /usr/lib/postgresql: run bash scripts/setup.sh"
            raise RuntimeError(msg)
        if shutil.which("redis-server") is None:
            msg = "redis-server is not installed: run bash scripts/setup.sh"
            raise RuntimeError(msg)
        pg_root = Path(tempfile.mkdtemp(prefix="raas-chaos-pg-"))  # the postgres user must reach it
        shutil.chown(pg_root, "postgres", "postgres")
        self.postgres = PrivatePostgres(pg_root)
        self.postgres.init()
        self.postgres.start()
        self.redis = PrivateRedis(self.root / "redis.log")
        self.redis.start()
        if self.docker_mode == "cut":
            self.docker_proxy = DockerSocketProxy(self.root / "docker.sock")
        elif self.docker_mode == "private":
            self.dockerd = PrivateDockerd(self.root / "docker", get_settings().sandbox_image)
            self.dockerd.start()
            self.dockerd.load_image()
        if self.store == "s3":
            self._start_s3()
        self.coordinator_ports = [free_port() for _ in range(self.replicas)]
        if self.replicas > 1:
            self._start_balancer()

    def start_balancer(self) -> None:
        """Once the coordinators answer (HAProxy's start waits for a healthy one)."""
        if self.balancer is not None:
            self.balancer.start()

    def _start_s3(self) -> None:
        port = free_port()
        with (self.root / "moto.log").open("ab") as log:
            proc = subprocess.Popen(
                ["moto_server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        wait_http(f"http://127.0.0.1:{port}/moto-api/")
        self.s3_gate = TcpProxy(port)
        self.s3 = ObjectStoreServer(f"http://127.0.0.1:{self.s3_gate.port}", proc)
        self.s3.make_bucket(S3_BUCKET)

    def _start_balancer(self) -> None:
        """HAProxy in front of the coordinators, as docs/deploy.md configures it."""
        backends = {f"coordinator{i}": port for i, port in enumerate(self.coordinator_ports)}
        self.balancer = Haproxy(self.root, backends)
        self.balancer_port = self.balancer.port

    @property
    def docker_host(self) -> str | None:
        """The engine the stack uses, None for the machine's (``restart`` mode)."""
        if self.dockerd is not None:
            return self.dockerd.docker_host
        return self.docker_proxy.docker_host if self.docker_proxy is not None else None

    def workspace_store(self, cache_dir: Path) -> S3Store:
        """The stack's workspace store, for this process's own checks (its credentials scoped
        to the client's making: boto3 reads them then)."""
        assert self.s3 is not None
        with mock.patch.dict(os.environ, CREDENTIALS):
            bucket = Bucket(Location(S3_BUCKET, "workspaces"), self.s3.endpoint)
        assert self.postgres is not None
        return S3Store(bucket, cache_dir, self.postgres.url)

    @property
    def coordinator_url(self) -> str:
        port = self.balancer_port if self.balancer_port is not None else self.coordinator_ports[0]
        return f"http://127.0.0.1:{port}"

    def env(self) -> dict[str, str]:
        """What every process of the stack is started with to use these services."""
        assert self.postgres is not None
        assert self.redis is not None
        env = {
            "RAAS_DATABASE_URL": self.postgres.url,
            "RAAS_BROKER_URL": self.redis.url(),
            "RAAS_REDIS_URL": self.redis.url(),
            "RAAS_COORDINATOR_URL": self.coordinator_url,
        }
        if self.docker_host is not None:
            env["DOCKER_HOST"] = self.docker_host
        if self.s3 is not None:
            env |= self.s3.env(S3_BUCKET)
        return env

    # --- the faults ------------------------------------------------------------------------

    def restart_redis(self, down_s: float) -> None:
        """SIGKILL, then the same port again, empty: queues, unacked messages, subscriptions gone."""
        assert self.redis is not None
        self.redis.kill()
        time.sleep(down_s)
        self.redis.start()

    def restart_postgres(self, down_s: float) -> None:
        """A fast shutdown (every session ended, a clean checkpoint), then the same port again."""
        assert self.postgres is not None
        self.postgres.stop("fast")
        time.sleep(down_s)
        self.postgres.start()

    def break_docker(self, down_s: float) -> None:
        if self.dockerd is not None:
            self.dockerd.restart(down_s)
        elif self.docker_proxy is not None:
            self.docker_proxy.cut()
            time.sleep(down_s)
            self.docker_proxy.restore()
        else:
            restart_dockerd(down_s)

    def break_store(self, down_s: float) -> None:
        assert self.s3_gate is not None
        self.s3_gate.cut()
        time.sleep(down_s)
        self.s3_gate.restore()

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.s3_gate is not None:
            self.s3_gate.close()
        if self.docker_proxy is not None:
            self.docker_proxy.close()
        if self.dockerd is not None:
            self.dockerd.stop()
        if self.redis is not None:
            self.redis.kill()
        if self.postgres is not None and self.postgres.running():
            with contextlib.suppress(RuntimeError):
                self.postgres.stop("immediate")
