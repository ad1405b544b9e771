"""Coordinator replicas for end-to-end tests and benchmarks: a second (or third) ``raas
coordinator`` beside a :class:`~tests.support.stack.Stack`'s own, Debian's HAProxy on loopback in
front of them, and the reconcile lease as the database holds it.

The proxy is configured as docs/deploy.md and compose.yaml configure it: round robin, a health
check on ``GET /readyz`` (so a draining replica is taken out), and a connection refused by a
dead replica retried on another (``option redispatch``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import select

from orchestrator.scheduling.lease import RECONCILE
from shared.db import session_scope
from shared.models.cluster import Lease
from tests.support.faults import Follower, Rig, write_project
from tests.support.loopback import free_port
from tests.support.stack import RAAS, Stack, wait_http

HAPROXY_CFG = """\
global
    maxconn 4096
defaults
    mode http
    option redispatch
    retries 3
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout tunnel 10m
frontend coordinators
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /readyz
    default-server inter 500ms fall 2 rise 1
{servers}
"""


def haproxy_config(port: int, backends: dict[str, int]) -> str:
    """HAProxy's configuration: ``port`` on loopback in front of ``backends`` (name: port)."""
    servers = "\n".join(f"    server {name} 127.0.0.1:{backend} check" for name, backend in backends.items())
    return HAPROXY_CFG.format(port=port, servers=servers)


@dataclass
class Haproxy:
    """HAProxy in the foreground, its configuration and log in ``directory``."""

    directory: Path
    backends: dict[str, int]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Haproxy:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(binary).exists():
            msg = "haproxy is not installed (scripts/setup.sh installs Debian's)"
            raise RuntimeError(msg)
        config = self.directory / "haproxy.cfg"
        config.write_text(haproxy_config(self.port, self.backends))
        with (self.directory / "haproxy.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [binary, "-db", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_http(f"{self.url}/readyz", proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def replica_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def start_replica(stack: Stack, name: str, port: int | None = None) -> int:
    """Another ``raas coordinator`` of the stack's database and broker, as the process ``name``; its port."""
    port = port or free_port()
    proc = stack.spawn(name, ["coordinator", "--port", str(port)])
    wait_http(f"{replica_url(port)}/readyz", proc=proc)
    return port


def cli_at(stack: Stack, url: str, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``raas ARGS`` against the coordinator at ``url`` (a replica or the proxy)."""
    env = {**stack.env, "RAAS_COORDINATOR_URL": url}
    return subprocess.run([*RAAS, *args], env=env, capture_output=True, text=True, timeout=timeout_s)


def lease_holder(database_url: str) -> tuple[str, int] | None:
    """(holder, epoch) of the reconcile lease while it has not expired, None otherwise."""
    with session_scope(database_url) as session:
        row = session.scalar(select(Lease).where(Lease.name == RECONCILE))
        if row is None or row.expires_at.timestamp() < time.time():
            return None
        return row.holder, row.epoch


def holder_process(stack: Stack, holder: str) -> str:
    """The stack's name of the process holding the lease (the holder names its pid)."""
    pid = int(holder.split(":")[1])
    for name, proc in stack.procs.items():
        if proc.pid == pid and proc.poll() is None:
            return name
    msg = f"no live process of the stack is the lease's holder {holder}"
    raise LookupError(msg)


def first_event_seq(url: str, project_id: str, cookie: str, last_event_id: int) -> int:
    """The seq of the first event the dashboard stream at ``url`` sends after ``Last-Event-ID``
    (a message carries a batch of events; its ``id:`` is the last one's)."""
    headers = {"Last-Event-ID": str(last_event_id), "Cookie": f"raas_session={cookie}"}
    with httpx.stream(
        "GET", f"{url}/ui/projects/{project_id}/events", headers=headers, timeout=30
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data:"):
                seq: int = json.loads(line.removeprefix("data:"))[0]["seq"]
                return seq
    msg = f"the stream at {url} ended before any event"
    raise AssertionError(msg)


def sign_in(url: str, token: str) -> str:
    """A dashboard session made at ``url``: its cookie."""
    response = httpx.post(f"{url}/login", data={"token": token}, follow_redirects=False, timeout=30)
    assert response.status_code == 303, response.text
    return response.cookies["raas_session"]


def status_of(stack: Stack, url: str, project_id: str) -> str:
    done = cli_at(stack, url, "status", project_id, "--json")
    assert done.returncode == 0, done.stderr
    status: str = json.loads(done.stdout)["status"]
    return status


def submit_at(rig: Rig, url: str) -> str:
    """A project of the rig's kind submitted through the coordinator at ``url``; its id."""
    project_dir = write_project(rig.work_dir / f"project-{len(rig.projects)}")
    submitted = cli_at(rig.stack, url, "submit", str(project_dir), "--json")
    assert submitted.returncode == 0, submitted.stderr + rig.explain()
    project_id: str = json.loads(submitted.stdout)["id"]
    rig.projects.append(project_id)
    return project_id


def follow_at(rig: Rig, project_id: str, url: str) -> Follower:
    """``raas follow ID --json`` through the coordinator at ``url``, as the rig's followers run."""
    name = f"follow-{project_id}-{len(rig.followers)}"
    out, err = rig.stack.log_dir / f"{name}.jsonl", rig.stack.log_dir / f"{name}.err"
    env = {**rig.stack.env, "RAAS_COORDINATOR_URL": url}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*RAAS, "follow", project_id, "--json"],
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    follower = Follower(proc, out, err)
    rig.followers.append(follower)
    return follower
