"""The project page on a long history, in Debian's Chromium: a 5,000-event project opens with
its graph built from the database (no replayed tool node), the research → builder → validator
flow laid out left to right with no label over another, and its timeline newest first, a page
at a time; filters and search narrow it exactly as the database says; bad filters answer 400."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Event
from shared.settings import get_settings
from tests.support.big_project import BigProject, make_big_project
from tests.support.dashboard import Server, dashboard_engine

pytestmark = [pytest.mark.e2e]

SCRIPT = {"responses": [{"content": [{"type": "text", "text": "unused"}]}], "when_exhausted": "repeat_last"}
READY = "() => window.raasLive && window.raasLive.ready !== null"
ROWS = "#timeline tr"


@pytest.fixture(scope="module")
def served(database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with dashboard_engine(SCRIPT, tmp_path_factory.mktemp("dash")) as (_eng, server):
        yield server


@pytest.fixture(scope="module")
def big(served: Server) -> BigProject:
    return make_big_project(5000, name="long history")


@pytest.fixture
def page(browser: Browser, served: Server) -> Iterator[Page]:
    page = browser.new_page()
    page.goto(served.url + "/login")
    page.fill("#token", get_settings().api_token.get_secret_value())
    page.click("#sign-in")
    page.wait_for_url(served.url + "/")
    yield page
    page.close()


def _open(page: Page, served: Server, project_id: str) -> None:
    page.goto(f"{served.url}/projects/{project_id}")
    page.wait_for_function(READY)


def _seqs(page: Page) -> list[int]:
    return page.eval_on_selector_all(ROWS, "rows => rows.map(r => Number(r.dataset.seq))")


def _wait_rows(page: Page, want: list[int]) -> None:
    """Until the timeline shows exactly these seqs, in this order (a filter's answer has come)."""
    page.wait_for_function(
        "(want) => JSON.stringify([...document.querySelectorAll('#timeline tr')]"
        ".map(r => Number(r.dataset.seq))) === JSON.stringify(want)",
        arg=want,
    )


def _shown_rows(project_id: str, **where: Any) -> list[int]:
    """The seqs a timeline row should stand for, newest first: every event but a result with a
    tool_use_id (it is its call's row)."""
    with session_scope() as session:
        found = session.execute(
            select(Event.seq, Event.type, Event.agent_id, Event.data).where(Event.project_id == project_id)
        ).all()
    rows = []
    for seq, kind, agent_id, data in found:
        if kind == "tool_executed" and data.get("tool_use_id"):
            continue
        if "agent" in where and agent_id != where["agent"]:
            continue
        if "type" in where and kind != where["type"]:
            continue
        if "errors" in where and not (kind == "agent_tool_call" and data["tool_use_id"] in where["errors"]):
            continue
        if "q" in where and where["q"] not in str(data):
            continue
        rows.append(seq)
    return sorted(rows, reverse=True)


def test_a_5000_event_project_opens_from_its_state_with_its_newest_events_first(
    page: Page, served: Server, big: BigProject
) -> None:
    # When the finished project's page opens
    _open(page, served, big.id)

    # Then the graph holds its task and four agents, and not one replayed tool call
    nodes = page.evaluate("window.raasLive.nodes()")
    assert sorted(n["kind"] for n in nodes) == ["agent"] * 4 + ["task"]
    assert page.evaluate("window.raasLive.shown") == 0  # nothing replayed through the stream
    # And it flows left to right: the task, its research, its builder, then its validator
    x = page.evaluate(
        "(() => { const p = {}; window.raasLive.cy().nodes()"
        ".forEach(n => p[n.data('category') || n.id()] = n.position('x')); return p; })()"
    )
    assert x["t:main"] < x["searcher"] < x["builder"] < x["validator"]
    assert x["analyzer"] == pytest.approx(x["searcher"])
    edges = page.evaluate("window.raasLive.cy().edges().map(e => [e.source().id(), e.target().id()])")
    assert [f"a:{big.searcher}", f"a:{big.builder}"] in edges
    assert [f"a:{big.builder}", f"a:{big.validator}"] in edges
    assert [f"a:{big.builder}", f"a:{big.searcher}"] not in edges
    # And no node's label covers another's
    boxes = page.evaluate(
        "window.raasLive.cy().nodes().map(n => { const b = n.boundingBox({includeLabels: true});"
        " return [b.x1, b.y1, b.x2, b.y2]; })"
    )
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)

    # And the timeline shows the newest page only, newest first, with older pages on demand
    expected = _shown_rows(big.id)
    assert _seqs(page) == expected[:50]
    assert page.locator("*").count() < 3000
    page.click("#timeline-older")
    expect(page.locator(ROWS)).to_have_count(100)
    assert _seqs(page) == expected[:100]

    # And a tool call and its result are one row: its duration, its full input and output
    call = page.locator("#timeline tr.type-agent_tool_call").first
    expect(call.locator("td.took")).to_have_text(re.compile(r"^\d+\.\ds$"))
    call.locator("summary").click()
    seq = int(call.get_attribute("data-seq") or 0)
    assert call.locator(".io.input pre").inner_text() == f"command:\necho {seq - 1}\nls -la"
    assert call.locator(".io.output pre").inner_text() == f"out {seq}\nline two"
    assert page.locator("#timeline tr.type-tool_executed").count() == 0
    # And agents are named by category and short id, and link to the inspector
    agent = call.locator("td.agent button")
    expect(agent).to_have_text(f"builder {big.builder[:6]}")
    agent.click()
    expect(page.locator("#inspector-body h3")).to_contain_text(f"builder {big.builder[:6]}")
    # And the time says its date on hover
    assert re.search(r"\d{4}", call.locator("td.time").get_attribute("title") or "")

    # And the finished project's actions are all disabled; money has one spelling
    for action in ("pause", "resume", "stop", "budget", "prompt"):
        expect(page.locator(f"#action-{action}")).to_be_disabled()
    expect(page.locator("#project-spent")).to_have_text("$0.0363")
    expect(page.locator("#budget-input")).to_have_value("$5.0000")
    expect(page.locator("#prompt-input")).to_have_value("Build it.\nThen check it.")


def test_filters_and_search_narrow_the_timeline_as_the_database_says(
    page: Page, served: Server, big: BigProject
) -> None:
    _open(page, served, big.id)
    with session_scope() as session:
        failed = {
            str(d["tool_use_id"])
            for d in session.scalars(
                select(Event.data).where(Event.project_id == big.id, Event.type == "tool_executed")
            )
            if d["is_error"]
        }
    # Errors only: the failed tool calls, each one row marked as an error
    page.check("#filter-errors")
    expected = _shown_rows(big.id, errors=failed)
    _wait_rows(page, expected[:50])
    assert page.locator("#timeline tr.tool-error").count() == len(_seqs(page))
    page.uncheck("#filter-errors")

    # One event type, older pages included
    page.select_option("#filter-type", "iteration_started")
    expected = _shown_rows(big.id, type="iteration_started")
    assert len(expected) == 100
    _wait_rows(page, expected[:50])
    page.click("#timeline-older")
    _wait_rows(page, expected)
    expect(page.locator("#timeline-older")).to_be_hidden()
    page.select_option("#filter-type", "")

    # One agent: the builder wrote everything, the searcher nothing (and the page says so)
    page.select_option("#filter-agent", big.searcher)
    expect(page.locator(ROWS)).to_have_count(0)
    expect(page.locator("#timeline-empty")).to_contain_text("No event matches these filters")
    page.select_option("#filter-agent", big.builder)
    _wait_rows(page, _shown_rows(big.id, agent=big.builder)[:50])
    page.select_option("#filter-agent", "")

    # Search: one chunk's words find that one row (its newlines kept)
    page.fill("#filter-q", "part 4998.")
    assert _shown_rows(big.id, q="part 4998.") == [4999]
    _wait_rows(page, [4999])
    assert page.locator("#timeline td.what").first.inner_text() == "Looking at part 4998.\nNext line of 4998."


def test_bad_filters_and_pages_answer_400_with_what_to_do(
    page: Page, served: Server, big: BigProject
) -> None:
    url = f"{served.url}/ui/projects/{big.id}/timeline.json"
    cases = {
        "type=nope": "no event type 'nope'; use one of",
        "before=999999": "page before event 999999 is out of range; this project's events are 1 to 5000",
        "before=0": "out of range",
        "limit=abc": "limit='abc' is not a whole number",
        "limit=100000": "a page of 100000 rows is out of range",
        "agent=ghost": "no agent 'ghost' in project",
        "task=ghost": "no task 'ghost' in project",
        "errors=maybe": "is not a yes or no",
    }
    for query, words in cases.items():
        answer = page.request.get(f"{url}?{query}")
        assert answer.status == 400, query
        assert words in answer.json()["detail"], (query, answer.json())
    good = page.request.get(f"{url}?type=iteration_started&limit=5")
    assert good.status == 200
    assert [r["seq"] for r in good.json()["rows"]] == [4951, 4901, 4851, 4801, 4751]


def test_the_page_follows_the_systems_dark_theme_and_works_from_the_keyboard(
    page: Page, served: Server, big: BigProject
) -> None:
    # Given a system that prefers dark
    page.emulate_media(color_scheme="dark")
    _open(page, served, big.id)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 23, 29)"
    page.emulate_media(color_scheme="light")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"

    # When the user types "/" the search has the focus, with a visible outline
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "filter-q"
    # And in the agent list the arrow keys move between agents and Enter opens one
    page.locator("#agent-list button").first.focus()
    page.keyboard.press("ArrowRight")
    focused = page.evaluate("document.activeElement.dataset.agent")
    assert focused == page.locator("#agent-list button").nth(1).get_attribute("data-agent")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    page.keyboard.press("Enter")
    expect(page.locator("#inspector-body")).to_have_attribute("data-agent", focused)
    expect(page.locator(f'#agent-list button[data-agent="{focused}"]')).to_have_attribute(
        "aria-current", "true"
    )
