"""One truth on the project page (issue #28 point 2), in Debian's Chromium: an agent's inspector
opened while it works (its live output already showing what it wrote) follows the project to
its end without being reopened, and then says what the agent list, the graph, the header and
the database say: status, iterations, cost."""

from __future__ import annotations

import os
import shutil
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Agent, Message, Project, ProjectStatus
from shared.settings import get_settings
from tests.support.dashboard import dashboard_engine, submit
from tests.support.stack import ROOT_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

PIPELINE = 'workflow = "pipeline"\ncheck_command = "test -f done.txt"\nresearch = ["searcher"]\n'
SCRIPT = {
    "responses": [
        {"content": [{"type": "text", "text": "Research: write done.txt."}]},  # the searcher
        {  # the builder says what it does, then writes
            "content": [
                {"type": "text", "text": "Writing the file now."},
                {"type": "tool_use", "name": "write", "input": {"path": "done.txt", "content": "yes\n"}},
            ]
        },
        # its next call takes a while: the page is opened on it meanwhile
        {
            "content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "wrote it"}}],
            "latency_s": 4,
        },
    ],
    "when_exhausted": "repeat_last",
}


def _money(value: Decimal) -> str:
    return f"${value:,.4f}"


def test_the_inspector_list_graph_and_header_agree_after_the_project_finishes_under_them(
    services: dict[str, str], tmp_path: Path, browser: Browser
) -> None:
    with dashboard_engine(SCRIPT, tmp_path) as (eng, server):
        project_id = submit(eng, PIPELINE, None)
        eng.run_next(project_id)  # the searcher
        page = browser.new_page()
        page.goto(server.url + "/login")
        page.fill("#token", get_settings().api_token.get_secret_value())
        page.click("#sign-in")
        page.goto(f"{server.url}/projects/{project_id}")
        expect(page.locator("#stream-state")).to_have_text("live")

        # Given the builder mid-turn (its second call still waiting on the model)
        failures: list[BaseException] = []

        def work() -> None:
            try:
                eng.run_next(project_id)
            except BaseException as exc:  # re-raised by the assertion below
                failures.append(exc)

        builder_run = threading.Thread(target=work)
        builder_run.start()
        working = page.locator('#agent-list button[data-category="builder"][data-status="working"]')
        expect(working).to_have_count(1, timeout=30_000)
        page.wait_for_function(
            "() => window.raasLive.seqs.length > 0"
            " && document.querySelector('#timeline tr.type-agent_tool_call')"
        )
        # When its inspector is opened then: it says working, and its live output is not empty
        working.click()
        body = page.locator("#inspector-body")
        expect(body.locator('[data-field="status"]')).to_have_text("working")
        expect(page.locator("#live-output")).to_contain_text("Writing the file now.")
        builder_id = body.get_attribute("data-agent")
        assert builder_id
        # And the graph highlights it
        assert page.evaluate(f"window.raasLive.cy().getElementById('a:{builder_id}').hasClass('selected')")
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(tmp_path / "project-graph.png"))

        # When the project finishes under the open inspector
        builder_run.join(90)
        assert failures == []
        while eng.dispatcher.pending(project_id):
            eng.run_next(project_id)
        with session_scope() as session:
            project = session.get_one(Project, project_id)
            builder = session.get_one(Agent, builder_id)
            assert project.status == ProjectStatus.COMPLETED
            want: dict[str, Any] = {
                "status": builder.status.value,
                "iterations": str(builder.iterations),
                "cost": _money(builder.cost_usd),
                "spent": _money(project.spent_usd),
                "calls": str(
                    session.scalar(
                        select(func.count(Message.id)).where(
                            Message.agent_id == builder_id, Message.role == "assistant"
                        )
                    )
                ),
            }
        assert want["status"] == "completed"
        assert Decimal(want["cost"].lstrip("$")) > 0

        # Then every view says the same, and the database's numbers
        expect(page.locator("#project-status")).to_have_text("completed")
        expect(body.locator('[data-field="status"]')).to_have_text(want["status"])
        expect(body.locator('[data-field="iterations"]')).to_have_text(want["iterations"])
        expect(body.locator('[data-field="cost"]')).to_have_text(want["cost"])
        expect(body.locator('[data-field="calls"]')).to_have_text(want["calls"])
        assert want["calls"] == "2"  # the write, then task_complete
        listed = page.locator(f'#agent-list button[data-agent="{builder_id}"]')
        expect(listed).to_have_attribute("data-status", want["status"])
        expect(listed).to_contain_text(f"{want['status']} · {want['cost']}")
        page.wait_for_function(
            "([id, cost]) => window.raasLive.cy().getElementById('a:' + id).data('label').includes(cost)",
            arg=[builder_id, want["cost"]],
        )
        node = page.evaluate(
            f"(() => {{ const n = window.raasLive.cy().getElementById('a:{builder_id}');"
            " return {status: n.data('status'), label: n.data('label')}; })()"
        )
        assert node["status"] == want["status"]
        assert f"{want['iterations']} iteration" in node["label"]
        assert want["cost"] in node["label"]
        # And the labels, longer now than when the graph was laid out, still cover no other
        boxes = page.evaluate(
            "window.raasLive.cy().nodes(\"[kind != 'tool']\").map(n => {"
            " const b = n.boundingBox({includeLabels: true}); return [b.x1, b.y1, b.x2, b.y2]; })"
        )
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
        expect(page.locator("#project-spent")).to_have_text(want["spent"])
        expect(page.locator("#settled-usd")).to_have_text(want["spent"])  # the costs section
        # And its actions follow: nothing applies to a completed project
        for action in ("pause", "resume", "stop", "budget", "prompt"):
            expect(page.locator(f"#action-{action}")).to_be_disabled()
        page.locator(".timeline-section").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "project-costs.png"))
        page.close()
    if os.environ.get("RAAS_DASHBOARD_SCREENSHOTS"):  # refresh the README's images
        for name in ("project-graph.png", "project-costs.png"):
            shutil.copyfile(tmp_path / name, ROOT_DIR / "docs/img" / f"dashboard-{name}")
