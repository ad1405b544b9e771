"""`raas coordinator` serves the dashboard beside its API: signing in with the cluster token,
and the workers page showing who answers on the broker (the same query as `raas workers`) with
the configured link to Flower."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.stack import ROOT_DIR, Stack, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.docker]
FLOWER = "http://127.0.0.1:5555/flower"


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    running = Stack(
        log_dir=tmp_path / "logs",
        script=ROOT_DIR / "examples/scripts/hello.json",
        env={"RAAS_FLOWER_URL": FLOWER},
    ).start(workers=1)
    yield running
    running.stop()


def test_the_coordinator_serves_the_dashboard_and_its_workers_page(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.coordinator_port}"
    wait_http(f"{url}/login")
    with httpx.Client(base_url=url, timeout=20) as client:
        signed = client.post("/login", data={"token": os.environ["RAAS_API_TOKEN"], "next": "/workers"})
        assert signed.status_code == 303
        page = ""
        for _ in range(20):  # the worker answers the broker's broadcast once it is up
            page = client.get("/workers").text
            if "w0@" in page:
                break
        assert "w0@" in page, stack.logs()
        assert "coordinator@" in page
        assert f'href="{FLOWER}"' in page
        assert client.get("/").status_code == 200
        assert "content-security-policy" in client.get("/").headers
