"""The dashboard's inbox of approvals (issue #25 point 2: "the dashboard (an inbox of what waits
for me)") in a real browser: Debian's Chromium through Playwright.

A tenant signed in sees its own waiting approvals — project, what, deadline, default — and no
other tenant's; Approve and Reject with a comment decide that approval once, as ``raas approve``
does, and the list updates itself; an action without the session's CSRF token, or on another
tenant's approval, changes nothing. Real Postgres, the coordinator's state machine, the app
served by uvicorn.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.dashboard import mount_dashboard
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import Approval, ApprovalStatus, Project, ProjectStatus
from shared.settings import get_settings
from tests.support.coordinator import Coordinator
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.e2e]

GATE = {"diff": True, "deadline_s": 3600, "default": "reject"}


@pytest.fixture
def server(services: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    served = Server(
        mount_dashboard(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    )
    served.start()
    yield served
    served.stop()


def waiting_project(coordinator: Coordinator, tenant_id: str) -> tuple[str, str]:
    """A tenant's project whose finished work waits for approval; its id and the approval's."""
    project_id = coordinator.start(approvals=GATE)
    with session_scope() as session:
        session.get_one(Project, project_id).tenant_id = tenant_id
    coordinator.run_next(completed=True)
    return project_id, approval_of(project_id).id


def approval_of(project_id: str) -> Approval:
    with session_scope() as session:
        return session.scalars(select(Approval).where(Approval.project_id == project_id)).one()


def status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(url + "/")


def test_the_inbox_lists_my_waiting_approvals_and_decides_them_once(server: Server, browser: Browser) -> None:
    # Given two tenants; two of mine wait for approval, and one of theirs
    suffix = secrets.token_hex(4)
    (mine_token, theirs_token) = (create_tenant(f"inbox-{who}-{suffix}")[1] for who in "ab")
    me, them = (str(authenticate(t, "-").tenant_id) for t in (mine_token, theirs_token))
    coordinator = Coordinator()
    first, first_approval = waiting_project(coordinator, me)
    second, second_approval = waiting_project(coordinator, me)
    theirs, their_approval = waiting_project(coordinator, them)
    page = browser.new_page()
    page.set_default_timeout(15_000)
    # When I sign in and open "Waiting for me" from the navigation
    sign_in(page, server.url, mine_token)
    page.click("nav >> text=Waiting for me")
    page.wait_for_url(server.url + "/approvals")
    # Then my two approvals are listed with what, deadline and default; theirs is not
    rows = page.locator("#approvals tr[data-approval]")
    expect(rows).to_have_count(2)
    for project_id, approval_id in ((first, first_approval), (second, second_approval)):
        row = page.locator(f'tr[data-approval="{approval_id}"]')
        expect(row).to_contain_text(project_id)
        expect(row).to_contain_text("approve the work before delivery")
        expect(row.locator(".default")).to_have_text("reject")
        expect(row.locator(".deadline")).to_contain_text("UTC")
    expect(page.locator(f'tr[data-approval="{their_approval}"]')).to_have_count(0)
    # When I approve the first with a comment
    row = page.locator(f'tr[data-approval="{first_approval}"]')
    row.locator('input[name="comment"]').fill("ship it to staging")
    row.get_by_role("button", name="Approve").click()
    # Then the answer says so, the list drops it, and it was approved once, with my words
    expect(page.locator("#approval-msg")).to_contain_text(f"diff#1 of project {first} approved")
    expect(rows).to_have_count(1)
    decided = approval_of(first)
    assert (decided.status, decided.decided_by, decided.comment) == (
        ApprovalStatus.APPROVED,
        f"tenant:{me}",
        "ship it to staging",
    )
    assert status(first) == ProjectStatus.COMPLETED
    # When I reject the second with a comment
    row = page.locator(f'tr[data-approval="{second_approval}"]')
    row.locator('input[name="comment"]').fill("add a test first")
    row.get_by_role("button", name="Reject").click()
    # Then it is rejected, its builder works on, and nothing waits for me
    expect(page.locator("#approval-msg")).to_contain_text(f"diff#1 of project {second} rejected")
    expect(page.locator("#approvals")).to_contain_text("Nothing waits for you.")
    rejected = approval_of(second)
    assert (rejected.status, rejected.comment) == (ApprovalStatus.REJECTED, "add a test first")
    assert status(second) == ProjectStatus.RUNNING
    # When actions are posted without the session's CSRF token, or on another tenant's approval
    csrf = page.locator("form.signout input[name=csrf]").get_attribute("value")
    assert csrf
    forged = page.request.post(f"{server.url}/ui/approvals/{first_approval}/reject", form={"comment": "x"})
    theft = page.request.post(f"{server.url}/ui/approvals/{their_approval}/approve", form={"csrf": csrf})
    again = page.request.post(f"{server.url}/ui/approvals/{first_approval}/reject", form={"csrf": csrf})
    # Then they are refused and nothing changed
    assert forged.status == 403
    assert theft.status == 404
    assert again.status == 409
    assert "was approved by" in again.text()
    assert approval_of(first).status == ApprovalStatus.APPROVED
    assert approval_of(theirs).status == ApprovalStatus.WAITING
    assert status(theirs) == ProjectStatus.WAITING_FOR_APPROVAL
    page.close()
