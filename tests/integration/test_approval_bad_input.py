"""Bad input to ``raas approve`` and ``raas say`` (issue #25, Bad input): approving a project that
waits for nothing (running, paused, ended, or decided already), ``raas say`` to a finished project,
to an agent it does not have, or with no words. Each is the real CLI (a subprocess) against the
API served by uvicorn on Postgres: one ``error:`` line naming what is wrong, a non-zero exit, and
the project's status, events, approvals and messages as they were.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from orchestrator.api import create_app
from orchestrator.scheduling import lifecycle
from shared.db import session_scope
from shared.events import NullBus, RedisBus
from shared.models import Approval, Event, PersonMessage, Project
from shared.settings import get_settings
from tests.support.bad_input import assert_one_line_error
from tests.support.coordinator import Coordinator
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher
from tests.support.stack import RAAS

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # each CLI run starts a Python


@pytest.fixture
def api(services: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The coordinator's API on loopback; the CLI's environment to reach it."""
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    server = Server(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    server.start()
    yield {
        **os.environ,
        "RAAS_COORDINATOR_URL": server.url,
        "RAAS_API_TOKEN": settings.api_token.get_secret_value(),
    }
    server.stop()


def raas(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RAAS, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def state(project_id: str) -> tuple[str, int, list[tuple[str, str]], int]:
    """The project's status, its events, its approvals (key, status) and what people said to it."""
    with session_scope() as session:

        def count(model: type[Event] | type[PersonMessage]) -> int:
            query = select(func.count()).select_from(model).where(model.project_id == project_id)
            return session.scalar(query) or 0

        approvals = session.execute(
            select(Approval.key, Approval.status)
            .where(Approval.project_id == project_id)
            .order_by(Approval.key)
        ).all()
        return (
            session.get_one(Project, project_id).status.value,
            count(Event),
            [(key, status.value) for key, status in approvals],
            count(PersonMessage),
        )


def refused(env: dict[str, str], project_id: str, args: list[str], *fragments: str) -> None:
    before = state(project_id)
    assert_one_line_error(raas(env, *args), *fragments)
    assert state(project_id) == before


def test_approving_a_project_that_waits_for_nothing_is_one_line_and_changes_nothing(
    api: dict[str, str],
) -> None:
    coordinator = Coordinator()
    running = coordinator.start()
    refused(api, running, ["approve", running], f"project {running} waits for no approval (running)")
    lifecycle.pause_project(running, coordinator.dispatcher, NullBus())
    refused(api, running, ["approve", running], "waits for no approval (paused)")
    refused(api, running, ["approve", "no-such-project"], "no-such-project")


def test_approving_twice_is_refused_naming_the_first_decision(api: dict[str, str]) -> None:
    coordinator = Coordinator()
    waiting = coordinator.start(approvals={"diff": True})
    coordinator.run_next(completed=True)
    first = raas(api, "approve", waiting, "-m", "looks good")
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{waiting}: approve the work before delivery approved\n"
    refused(
        api,
        waiting,
        ["approve", waiting],
        "waits for no approval (completed)",
        "diff#1 was approved by operator",
    )
    refused(api, waiting, ["approve", waiting, "--reject"], "diff#1 was approved by operator")


def test_say_to_a_finished_project_or_a_missing_agent_is_one_line_and_writes_nothing(
    api: dict[str, str],
) -> None:
    coordinator = Coordinator()
    project_id = coordinator.start()
    refused(api, project_id, ["say", project_id, "--agent", "nosuchagent", "hi"], "has no agent nosuchagent")
    refused(api, project_id, ["say", project_id, "   "], "give 1 to 8000 characters")
    lifecycle.stop_project(project_id, coordinator.dispatcher, NullBus())
    refused(
        api, project_id, ["say", project_id, "are you there?"], "has ended (stopped)", "no agent will read"
    )
    refused(api, project_id, ["approve", project_id], "waits for no approval (stopped)")
