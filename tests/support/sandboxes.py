"""The label every sandbox a test run makes carries, so that teardown removes exactly those; and
a record of the containers an iteration's worker started, as Docker describes them."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.environment import Prepared
from workers.sandbox.base import Sandbox, SandboxLimits
from workers.sandbox.container import SandboxMounts
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.factory import DockerSandboxConfig, factory_for

RUN_LABEL = "raas.test-run"
RUN_ID = secrets.token_hex(4)
SANDBOX_IMAGE = os.environ.get("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
SandboxFactory = Callable[..., DockerSandbox]


class WatchedSandboxes:
    """The worker's own sandbox factory (``workers.sandbox.factory``, a Docker config), telling
    :meth:`started` of each sandbox once it is up: what a test or a benchmark wraps to look at the
    containers an iteration starts while the iteration runs exactly as it would."""

    def __init__(self, image: str) -> None:
        self._start = factory_for(DockerSandboxConfig(image=image))

    def __call__(
        self,
        workdir: Path,
        limits: SandboxLimits,
        labels: dict[str, str],
        name: str,
        mounts: SandboxMounts | None = None,
    ) -> Sandbox:
        began = time.time()
        sandbox = self._start(workdir, limits, labels, name, mounts)
        self.started(sandbox, began)
        return sandbox

    def started(self, sandbox: Sandbox, began: float) -> None:
        """Called with each sandbox as soon as it is up (``began``: when its start began, epoch s)."""


class InspectedSandboxes(WatchedSandboxes):
    """The worker's own sandbox factory, keeping what ``docker inspect`` said of each container it
    started, taken once it was up.

    Give it to an engine (``eng.sandbox_factory = InspectedSandboxes(image)``): the iteration
    runs exactly as it would, and the test can read the container's configuration afterwards,
    when the container itself is gone.
    """

    def __init__(self, image: str) -> None:
        super().__init__(image)
        self.inspected: list[dict[str, Any]] = []

    def started(self, sandbox: Sandbox, began: float) -> None:
        assert isinstance(sandbox, DockerSandbox)
        self.inspected.append(sandbox.client.api.inspect_container(sandbox.container_id))


def run_with_environment(prepared: Prepared, workdir: Path, command: str) -> tuple[int | None, str]:
    """Run ``command`` in an iteration's sandbox with ``prepared``'s mounts, as the runner would
    start it; its exit code and output."""
    with DockerSandbox.start(
        image=SANDBOX_IMAGE,
        host_workspace=workdir,
        limits=SandboxLimits(),
        labels={RUN_LABEL: RUN_ID},
        name=f"raas-test-env-{RUN_ID}-{secrets.token_hex(3)}-{workdir.name}",
        mounts=prepared.mounts,
    ) as sandbox:
        result = sandbox.run(command, timeout_s=60)
    return result.exit_code, result.output
