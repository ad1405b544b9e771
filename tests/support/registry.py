"""A container registry on loopback for environment tests: Debian's ``docker-registry`` (the CNCF
distribution registry, scripts/setup.sh installs it) run as a child process of the test, its
storage in a temporary directory, on a free port of 127.0.0.1 (the engine allows plain HTTP to
127.0.0.0/8 registries without configuration). Never the Debian service."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.loopback import free_port

BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
CONFIG = """version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
http:
  addr: 127.0.0.1:{port}
"""


class Registry:
    """One registry process; ``address`` is ``127.0.0.1:PORT``, the same after :meth:`stop`."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        (directory / "storage").mkdir()
        config = directory / "config.yml"
        config.write_text(CONFIG.format(storage=directory / "storage", port=self.port), encoding="utf-8")
        self.log = (directory / "registry.log").open("wb")
        self.process = subprocess.Popen(
            [BINARY, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, within_s: float = 20.0) -> None:
        deadline = time.monotonic() + within_s
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    msg = f"docker-registry did not answer on {self.address} (see {self.log.name})"
                    raise RuntimeError(msg) from None
                time.sleep(0.1)

    def tags(self, repository: str) -> list[str]:
        """The tags of ``repository`` the registry holds (its HTTP API v2)."""
        try:
            with urllib.request.urlopen(
                f"http://{self.address}/v2/{repository}/tags/list", timeout=5
            ) as answer:
                return list(json.load(answer).get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@contextmanager
def registry(directory: Path) -> Iterator[Registry]:
    """A running registry storing under ``directory``; stopped on leaving."""
    server = Registry(directory)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
