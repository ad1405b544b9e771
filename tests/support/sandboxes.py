"""The label every sandbox a test run makes carries, so that teardown removes exactly those."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable

from workers.sandbox.docker import DockerSandbox

RUN_LABEL = "raas.test-run"
RUN_ID = secrets.token_hex(4)
SANDBOX_IMAGE = os.environ.get("RAAS_SANDBOX_IMAGE", "constellation-sandbox:bookworm")
SandboxFactory = Callable[..., DockerSandbox]
