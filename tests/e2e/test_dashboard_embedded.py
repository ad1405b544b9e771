"""`raas run DIR --ui`: the embedded engine serves the same dashboard on loopback while the
project runs (events read from its database, no Redis), and its actions act on the run."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from shared.models import Project, ProjectStatus
from tests.support.stack import RAAS
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer

pytestmark = [pytest.mark.e2e]

# Each iteration changes the workspace (the breaker pauses a run that makes no progress).
WORKING = {
    "responses": [
        {"content": [{"type": "tool_use", "name": "bash", "input": {"command": "date +%s%N >> notes.txt"}}]},
        {"content": [{"type": "text", "text": "Still looking into it."}], "latency_s": 0.3},
    ],
    "when_exhausted": "cycle",
}


def _announced(proc: subprocess.Popen[bytes], stderr: Path) -> tuple[str, str]:
    """The dashboard's URL and token from the run's stderr."""
    pattern = r"dashboard: (http://127\.0\.0\.1:\d+)/ \(sign in with this run's token: (\S+)\)"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(pattern, stderr.read_text())
        if found:
            return found.group(1), found.group(2)
        time.sleep(0.1)
    msg = f"raas run --ui did not announce its dashboard: {stderr.read_text()}"
    raise AssertionError(msg)


def test_raas_run_ui_serves_the_dashboard_and_stops_the_run_from_it(tmp_path: Path, browser: Browser) -> None:
    project_dir = tmp_path / "proj"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Keep looking.\n")
    (project_dir / "raas.toml").write_text("max_iterations = 200\n")
    data_dir = tmp_path / "data"
    with ScriptedModelServer(Script.model_validate(WORKING)) as model:
        env = {k: v for k, v in os.environ.items() if k not in ("RAAS_DATABASE_URL", "ANTHROPIC_API_KEY")}
        env.update(
            {"RAAS_DATA_DIR": str(data_dir), "ANTHROPIC_BASE_URL": model.base_url, "PYTHONUNBUFFERED": "1"}
        )
        run = [*RAAS, "run", str(project_dir), "--sandbox", "local", "--ui", "0"]
        # Files, not pipes: a pipe nobody reads would fill and stall the run's output.
        with (tmp_path / "run.out").open("wb") as out, (tmp_path / "run.err").open("wb") as err:
            proc = subprocess.Popen(run, env=env, stdout=out, stderr=err)
        try:
            url, token = _announced(proc, tmp_path / "run.err")
            page = browser.new_page()
            page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm asks before Stop

            # Given the run's dashboard, signed in with the run's token
            page.goto(url + "/")
            page.fill("#token", token)
            page.click("#sign-in")

            # The projects list follows the run without a reload (no Redis here: it re-reads its
            # rows every few seconds): the iteration column moves on
            iteration = page.locator("tr.project-row td:nth-child(4)")
            expect(iteration).not_to_have_text("0 of 200", timeout=30_000)
            shown = iteration.inner_text()
            expect(iteration).not_to_have_text(shown, timeout=30_000)
            page.locator("tr.project-row a").first.click()

            # When iterations run, the page shows them live (from the run's database)
            expect(page.locator("tr.type-iteration_complete").first).to_be_attached(timeout=30_000)

            # And the working agent's inspector shows its output as it streams (the agent list is
            # drawn again as the run moves on: a click on a button being replaced opens nothing, so
            # it is clicked again, at most three times)
            for _ in range(3):
                page.locator("#agent-list button").first.click()
                try:
                    expect(page.locator("#live-output")).to_be_attached(timeout=10_000)
                    break
                except AssertionError:
                    continue
            expect(page.locator("#live-output")).to_contain_text("Still looking into it.", timeout=30_000)

            # And the user stops the project from the page, the run ends with it
            page.click("#action-stop")
            expect(page.locator("#msg-stop")).to_contain_text("stopped")
            assert proc.wait(timeout=60) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    engine = create_engine(f"sqlite:///{data_dir / 'raas.db'}")
    with Session(engine) as session:
        assert session.scalars(select(Project.status)).one() == ProjectStatus.STOPPED
    engine.dispose()
