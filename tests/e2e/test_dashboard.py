"""The dashboard in a real browser (Debian's Chromium through Playwright) while a pipeline
project with two parallel subagents runs on the scripted model: the page updates live, the
inspector shows history and diffs, actions change the database, costs match `raas cost --json`,
a dropped connection resumes gaplessly, tenants are kept apart, and agent text stays text.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Dialog, Page, Request, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from orchestrator.api.tenants import create_tenant
from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.support.dashboard import dashboard_engine, submit
from tests.support.stack import RAAS

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

XSS = (
    "REPORT <script>window.__xss = 1; alert('script')</script> "
    "<img src=x onerror=\"alert('img')\"> <a href=\"javascript:alert('link')\">click me</a> "
    "[md](javascript:alert(4))"
)
PIPELINE = 'workflow = "pipeline"\ncheck_command = "test -f done.txt"\nresearch = ["searcher", "analyzer"]\n'


def _text(words: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": words}]}


def _tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": args}]}


SCRIPT = {
    "responses": [
        _text(XSS),  # the searcher
        _text(XSS),  # the analyzer (either research agent may run first)
        # the builder, kept working a moment before its tool call (the graph animates it)
        {**_tool("write", path="done.txt", content="yes\n"), "latency_s": 1.5},
        _tool("task_complete", summary="wrote done.txt"),
    ],
    "when_exhausted": "repeat_last",
}


def _status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def _sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(url + "/")


# The builder's node in the graph cytoscape draws (read in the page).
BUILDER = "window.raasLive.cy().nodes(\"node[kind = 'agent'][category = 'builder']\")"
SEARCHER = "window.raasLive.cy().nodes(\"node[kind = 'agent'][category = 'searcher']\")"
TOOLS = "\"node[kind = 'tool']\""  # the transient nodes of an agent's tool calls


def _run_next(eng: Any, project_id: str, failures: list[BaseException]) -> None:
    """One iteration in a thread, so the page can be watched while it runs."""
    try:
        eng.run_next(project_id)
    except BaseException as exc:  # re-raised by the test's assertion on ``failures``
        failures.append(exc)


def _agent_button(page: Page, category: str, status: str | None = None) -> Any:
    selector = f'#agent-list button[data-category="{category}"]'
    if status:
        selector += f'[data-status="{status}"]'
    return page.locator(selector)


def _click_node(page: Page, node: str) -> None:
    """Click a graph node where it is drawn at that moment, as a user would; again (at most 3
    times) when the click opened no agent: the page above the graph can still grow between
    measuring and clicking, on a loaded machine, and move the node from under the pointer."""
    for _ in range(3):
        page.locator("#graph").scroll_into_view_if_needed()
        box = page.locator("#graph").bounding_box()
        assert box is not None
        x, y = page.evaluate(f"(() => {{ const p = {node}.renderedPosition(); return [p.x, p.y]; }})()")
        try:
            with page.expect_request(lambda request: "/agents/" in request.url, timeout=5000):
                page.mouse.click(box["x"] + x, box["y"] + y)
        except PlaywrightTimeout:
            continue
        return
    msg = "three clicks on the graph node opened no agent"
    raise AssertionError(msg)


def test_a_pipeline_is_watched_inspected_steered_and_costed_live_in_a_browser(
    services: dict[str, str], tmp_path: Path, browser: Browser
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    _, token_a = create_tenant(f"dash-a-{os.getpid()}-{tmp_path.name[-6:]}")
    tenant_b, _ = create_tenant(f"dash-b-{os.getpid()}-{tmp_path.name[-6:]}")
    with dashboard_engine(SCRIPT, tmp_path) as (eng, server):
        from orchestrator.api.tenants import authenticate

        tenant_a = authenticate(token_a, "-").tenant_id
        mine = submit(eng, PIPELINE, tenant_a)
        theirs = submit(eng, PIPELINE, tenant_b)
        page = browser.new_page()
        dialogs: list[str] = []
        foreign: list[str] = []

        def on_dialog(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        def on_request(request: Request) -> None:
            if not request.url.startswith(server.url):
                foreign.append(request.url)

        page.on("dialog", on_dialog)
        page.on("request", on_request)

        # Given tenant A signed in: the list shows A's project and not B's; B's page is a 404
        _sign_in(page, server.url, token_a)
        expect(page.locator(f'tr[data-project="{mine}"]')).to_be_visible()
        assert page.locator(f'tr[data-project="{theirs}"]').count() == 0
        # And a project created meanwhile appears in the list without a reload
        later = submit(eng, PIPELINE, tenant_a)
        expect(page.locator(f'tr[data-project="{later}"]')).to_be_visible()
        answer = page.goto(f"{server.url}/projects/{theirs}")
        assert answer is not None
        assert answer.status == 404
        expect(page.locator("#not-found-message")).to_contain_text("no project")

        # When A's project page is open and the research subagents run, the page follows live
        page.goto(f"{server.url}/projects/{mine}")
        expect(page.locator("#stream-state")).to_have_text("live")
        expect(_agent_button(page, "searcher")).to_have_count(1)
        expect(_agent_button(page, "analyzer")).to_have_count(1)
        eng.run_next(mine)
        eng.run_next(mine)
        expect(_agent_button(page, "searcher", "completed")).to_have_count(1)
        expect(_agent_button(page, "analyzer", "completed")).to_have_count(1)
        expect(_agent_button(page, "builder")).to_have_count(1)
        # And the graph (cytoscape, laid out by dagre) draws the task and its agents, statuses included
        page.wait_for_function(
            "window.raasLive.nodes().filter(n => n.kind === 'agent' && n.status === 'completed').length === 2"
        )
        drawn = page.evaluate("window.raasLive.nodes()")
        assert {"id": "t:main", "kind": "task", "status": "running"} in drawn
        assert sorted(n["status"] for n in drawn if n["kind"] == "agent") == [
            "completed",
            "completed",
            "idle",
        ]
        # And the cost chart's time axis spans the run's minutes, not years (uPlot's lone-point default)
        page.wait_for_function("() => window.raasLive.chartRange() !== null")
        first, last = page.evaluate("window.raasLive.chartRange()")
        assert 0 < last - first < 600
        # And the timeline speaks in sentences where an event has one, not raw JSON
        started = page.locator("#timeline tr.type-iteration_started td:nth-child(5)").first
        expect(started).to_have_text("iteration 1 on test-worker")
        assert page.locator("#timeline td:nth-child(5)", has_text="{").count() == 0

        # Then clicking the searcher's node in the graph opens its history, where the model's markup
        # is only text
        _click_node(page, SEARCHER)
        expect(page.locator("#inspector-body .badge")).to_be_visible(timeout=15_000)
        expect(page.locator("#inspector-body h3")).to_contain_text("searcher")
        expect(page.locator("#inspector-body")).to_be_visible()
        page.click("#tab-history")
        expect(page.locator("#history")).to_contain_text("<script>window.__xss = 1;")
        expect(page.locator("#history")).to_contain_text("onerror")
        assert page.locator("#history img").count() == 0
        assert page.locator("#history a").count() == 0
        assert page.evaluate("window.__xss") is None

        # When the user pauses and resumes from the page, the database follows
        page.click("#action-pause")
        expect(page.locator("#msg-pause")).to_contain_text("paused")
        assert _status(mine) == ProjectStatus.PAUSED
        expect(page.locator("#project-status")).to_have_text("paused")
        page.click("#action-resume")
        expect(page.locator("#msg-resume")).to_contain_text("resumed")
        assert _status(mine) == ProjectStatus.RUNNING
        # And an action that cannot apply now is disabled; a refused one answers the CLI's one-line
        # message beside it
        expect(page.locator("#action-resume")).to_be_disabled()
        expect(page.locator("#action-pause")).to_be_enabled()
        page.fill("#budget-input", "-3")
        page.click("#action-budget")
        expect(page.locator("#msg-budget")).to_contain_text("is not a positive amount of USD")
        expect(page.locator("#msg-resume")).to_be_empty()  # only the last action's answer stays
        expect(page.locator("tr.type-project_paused")).to_have_count(1)
        expect(page.locator("tr.type-project_resumed")).to_have_count(1)

        # When the builder works, its node breathes (the pulse class comes and goes) and its tool
        # call appears on it as a node while it runs
        failures: list[BaseException] = []
        builder = threading.Thread(target=_run_next, args=(eng, mine, failures))
        builder.start()
        page.wait_for_function(f"() => {BUILDER}.data('status') === 'working' && {BUILDER}.hasClass('pulse')")
        page.wait_for_function(
            f"() => {BUILDER}.data('status') === 'working' && !{BUILDER}.hasClass('pulse')"
        )
        page.wait_for_function(f"() => {BUILDER}.outgoers({TOOLS}).some(t => t.data('label') === 'write')")
        page.screenshot(path=str(shots / "project-graph.png"), full_page=True)
        builder.join(60)
        assert failures == []
        # And once done, its tool nodes go and it stops breathing
        page.wait_for_function(
            f"() => {BUILDER}.outgoers({TOOLS}).length === 0 && !{BUILDER}.hasClass('pulse')"
        )

        # When the coordinator restarts while the validator works, the page resumes where it was
        server.stop()
        eng.run_next(mine)  # the validator: events written while no one serves the page
        server.start()
        while eng.dispatcher.pending(mine):
            eng.run_next(mine)
        assert _status(mine) == ProjectStatus.COMPLETED
        expect(page.locator("tr.type-project_completed")).to_have_count(1, timeout=30_000)
        with session_scope() as session:
            last = session.get_one(Project, mine).last_event_seq
        # (the page started from the state at its last seq, then had every later one exactly once)
        live = page.evaluate(
            "({start: window.raasLive.startSeq, seqs: window.raasLive.seqs,"
            " repeated: window.raasLive.repeated})"
        )
        assert live["seqs"] == list(range(live["start"] + 1, last + 1))
        assert live["repeated"] == 0  # the server resumed after the last seq seen
        seqs = page.eval_on_selector_all("#timeline tr", "rows => rows.map(r => Number(r.dataset.seq))")
        assert seqs == sorted(set(seqs), reverse=True)  # newest first, each once
        assert seqs[0] == last
        expect(page.locator("#timeline tr.tool-ok").first).to_be_attached()  # tool calls marked by outcome

        # And the builder's outputs show its diff, the new file marked
        _agent_button(page, "builder").click()
        page.click("#tab-outputs")
        expect(page.locator("#outputs .change-new").first).to_contain_text("done.txt")
        expect(page.locator("#cumulative-diff")).to_contain_text("+yes")
        page.click("#tab-config")
        expect(page.locator("#agent-config")).to_contain_text("claude-sonnet-4-6")
        expect(page.locator("#category-settings th", has_text="coordination")).to_have_count(1)

        # And the costs match `raas cost --json`
        cli = subprocess.run(
            [*RAAS, "cost", mine, "--json", "--iterations"],
            env={**os.environ, "RAAS_COORDINATOR_URL": server.url, "RAAS_API_TOKEN": token_a},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        report = json.loads(cli.stdout)
        expect(page.locator("#total-usd")).to_have_text(f"${Decimal(report['total_usd']):,.4f}")
        shown = page.eval_on_selector_all("#receipts tr.receipt", "rows => rows.map(r => r.dataset.cost)")
        assert [Decimal(c) for c in shown] == [Decimal(r["cost_usd"]) for r in report["receipts"]]
        page.wait_for_function("document.getElementById('cost-chart').dataset.last !== undefined")
        charted = float(page.eval_on_selector("#cost-chart", "b => b.dataset.last"))
        assert charted == pytest.approx(float(report["total_usd"]))
        page.locator("#costs").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "project-costs.png"), full_page=True)

        # And nothing any agent wrote ran or reached out, wherever it was shown (timeline included)
        expect(page.locator("#timeline")).to_contain_text("<img src=x onerror=")
        assert page.locator("img").count() == 0
        assert page.locator('a[href^="javascript:"]').count() == 0
        assert dialogs == []
        assert foreign == []
        page.close()
    # (The README's images come from test_dashboard_project_truth.py: no test payloads in them.)
