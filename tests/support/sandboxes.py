"""The label every sandbox a test run makes carries, so that teardown removes exactly those; and
a record of the containers an iteration's worker started, as Docker describes them."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.container import SandboxMounts
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.factory import DockerSandboxConfig, factory_for

RUN_LABEL = "raas.test-run"
RUN_ID = secrets.token_hex(4)
SANDBOX_IMAGE = os.environ.get("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
SandboxFactory = Callable[..., DockerSandbox]


class InspectedSandboxes:
    """The worker's own sandbox factory (``workers.sandbox.factory``, a Docker config), keeping what
    ``docker inspect`` said of each container it started, taken once it was up.

    Give it to an engine (``eng.sandbox_factory = InspectedSandboxes(image)``): the iteration
    runs exactly as it would, and the test can read the container's configuration afterwards,
    when the container itself is gone.
    """

    def __init__(self, image: str) -> None:
        self._start = factory_for(DockerSandboxConfig(image=image))
        self.inspected: list[dict[str, Any]] = []

    def __call__(
        self,
        workdir: Path,
        limits: SandboxLimits,
        labels: dict[str, str],
        name: str,
        mounts: SandboxMounts | None = None,
    ) -> Sandbox:
        sandbox = self._start(workdir, limits, labels, name, mounts)
        assert isinstance(sandbox, DockerSandbox)
        self.inspected.append(sandbox.client.api.inspect_container(sandbox.container_id))
        return sandbox
