"""Downloads and per-agent diffs on the dashboard (issue #28 point 4): a two-task project built on
the scripted model gives its workspace as a tar, its transcript in md, JSON and scg, its diff,
and each agent's own diff — only what that agent committed — as a file and coloured in a real
browser (Debian's Chromium). Another tenant's project, an unknown format and another project's
agent answer 404 with a line saying what is wrong.
"""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.transcripts.scg import MAGIC
from shared.db import session_scope
from shared.models import Agent, Project, ProjectStatus, Task
from tests.support.dashboard import dashboard_engine, submit

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

TWO_TASKS = """
[[tasks]]
id = "first"
title = "write a.txt"

[[tasks]]
id = "second"
title = "write b.txt"
depends_on = ["first"]
"""


def _tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": args}]}


SCRIPT = {
    "responses": [
        _tool("write", path="a.txt", content="from the first agent\n"),
        _tool("task_complete", summary="wrote a.txt"),
        _tool("write", path="b.txt", content="from the second agent\n"),
        _tool("task_complete", summary="wrote b.txt"),
    ],
    "when_exhausted": "repeat_last",
}


@contextmanager
def _client(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/login", data={"token": token, "next": "/"}).status_code == 303
        yield client


def test_a_projects_workspace_transcript_and_diffs_download_and_each_agents_diff_is_its_own(
    services: dict[str, str], tmp_path: Path, browser: Browser
) -> None:
    suffix = secrets.token_hex(4)
    _, token = create_tenant(f"dash-dl-a-{suffix}")
    _, other_token = create_tenant(f"dash-dl-b-{suffix}")
    tenant_id = authenticate(token, "-").tenant_id
    with dashboard_engine(SCRIPT, tmp_path) as (eng, server):
        # Given a two-task project whose two builders each wrote one file
        project_id = submit(eng, TWO_TASKS, tenant_id)
        eng.run_to_end(project_id)
        with session_scope() as db:
            assert db.get_one(Project, project_id).status == ProjectStatus.COMPLETED
            rows = db.execute(
                select(Task.key, Agent.id)
                .join(Agent, Agent.task_id == Task.id)
                .where(Task.project_id == project_id)
            ).all()
            builders = {key: agent_id for key, agent_id in rows}
        assert sorted(builders) == ["first", "second"]
        base = f"/projects/{project_id}/downloads"
        with _client(server.url, token) as mine, _client(server.url, other_token) as theirs:
            # Then the workspace is a tar of main's files
            tar = mine.get(f"{base}/workspace.tar")
            assert tar.status_code == 200
            assert tar.headers["content-type"] == "application/x-tar"
            with tarfile.open(fileobj=io.BytesIO(tar.content)) as archive:
                names = archive.getnames()
                assert {"a.txt", "b.txt"} <= set(names)
                read = archive.extractfile("b.txt")
                assert read is not None
                assert read.read() == b"from the second agent\n"
            # And the transcript comes in each format, as an attachment
            md = mine.get(f"{base}/transcript.md")
            assert md.status_code == 200
            assert "attachment" in md.headers["content-disposition"]
            assert "wrote a.txt" in md.text
            assert json.loads(mine.get(f"{base}/transcript.json").text)["project"]["id"] == project_id
            assert mine.get(f"{base}/transcript.scg").text.startswith(MAGIC)
            # And the project's diff has both files; each agent's only its own
            whole = mine.get(f"{base}/project.diff").text
            assert "+from the first agent" in whole
            assert "+from the second agent" in whole
            first = mine.get(f"{base}/agents/{builders['first']}.diff").text
            second = mine.get(f"{base}/agents/{builders['second']}.diff").text
            assert "+from the first agent" in first
            assert "b.txt" not in first
            assert "+from the second agent" in second
            assert "a.txt" not in second

            # And bad asks are one clear 404 each: another tenant's project, an unknown format,
            # an agent of another project
            for path in (
                "workspace.tar",
                "transcript.md",
                "project.diff",
                f"agents/{builders['first']}.diff",
            ):
                refused = theirs.get(f"{base}/{path}")
                assert refused.status_code == 404, path
                assert "no project" in refused.text
            odd = mine.get(f"{base}/transcript.pdf")
            assert odd.status_code == 404
            assert "no transcript format &#39;pdf&#39;; use md, json or scg" in odd.text
            stranger = submit(eng, TWO_TASKS, tenant_id)
            with session_scope() as db:
                foreign_agent = db.query(Agent).filter(Agent.project_id == stranger).first()
                assert foreign_agent is not None
                foreign_id = foreign_agent.id
            assert mine.get(f"{base}/agents/{foreign_id}.diff").status_code == 404
            assert mine.get(f"/ui/projects/{project_id}/agents/{foreign_id}/diff").status_code == 404

        # And in a browser, each agent's diff page colours what was added, per agent
        page = browser.new_page()
        page.goto(server.url + "/login")
        page.fill("#token", token)
        page.click("#sign-in")
        page.wait_for_url(server.url + "/")
        # (reached from the project page's downloads)
        page.goto(f"{server.url}/projects/{project_id}")
        expect(page.locator("#download-workspace")).to_have_attribute("href", f"{base}/workspace.tar")
        expect(page.locator("#download-transcript-scg")).to_have_attribute("href", f"{base}/transcript.scg")
        page.click("#agent-diffs")
        page.wait_for_url(f"{server.url}/projects/{project_id}/diffs")
        first_diff = page.locator(f"#agent-diff-{builders['first']}")
        second_diff = page.locator(f"#agent-diff-{builders['second']}")
        expect(first_diff.locator(".diff .add")).to_contain_text(["+from the first agent"])
        expect(first_diff).not_to_contain_text("b.txt")
        expect(second_diff.locator(".diff .add")).to_contain_text(["+from the second agent"])
        added = first_diff.locator(".diff .add").first.evaluate("e => getComputedStyle(e).backgroundColor")
        context = first_diff.locator(".diff .file").first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert added != context
        # And a download link there gives the same file as above
        with page.expect_download() as download:
            first_diff.locator("a[download]").click()
        saved = download.value.path()
        assert "+from the first agent" in Path(saved).read_text()
        page.close()
