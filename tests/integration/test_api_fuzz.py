"""Fuzzing the coordinator's HTTP API against its own OpenAPI schema (schemathesis).

The real coordinator app is served on loopback by the test harness, over real Postgres and
Redis. Every operation of the schema is called with generated parameters and bodies (valid and
invalid ones), half the time naming a project that exists, with the cluster's bearer token; every
answer must be no 5xx and match the schema: a documented status code, the documented content
type, headers and body shape, and a 401 when the same call is sent without the token.

Nothing is excluded; only ``follow=true`` on the existing project's events is sent as ``false``
(that stream stays open until the project ends, and this project never does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.api import create_app
from shared.events import RedisBus
from shared.settings import get_settings
from tests.support.engine import Engine, RecordingDispatcher, engine, pack

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IDLE = {"responses": [{"content": [{"type": "text", "text": "idle"}]}], "when_exhausted": "repeat_last"}
CHECKS = [
    not_a_server_error,
    ignored_auth,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def eng(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with engine(IDLE, tmp_path_factory.mktemp("fuzz")) as running:
        yield running


@pytest.fixture(scope="module")
def auth(eng: Engine) -> dict[str, str]:
    return {"Authorization": f"Bearer {eng.settings.api_token.get_secret_value()}"}


@pytest.fixture(scope="module")
def known_project(eng: Engine, auth: dict[str, str]) -> str:
    """A project that exists, so that generated calls reach past the 404 of an unknown id."""
    body = pack({"PROMPT.md": "Fuzz me.\n", "raas.toml": "", "notes.txt": "hello\n"})
    response = httpx.post(
        f"{eng.settings.coordinator_url}/v1/projects", content=body, headers=auth, timeout=20
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@schemathesis.serializer("application/gzip", "application/x-git-bundle")
def _binary(_ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    """Uploads the routes read themselves (documented as binary strings) go as the bytes drawn."""
    return value if isinstance(value, bytes) else str(value).encode()


def _served_schema() -> dict[str, Any]:
    """The OpenAPI document the coordinator serves (the same app the harness runs)."""
    settings = get_settings()
    return create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)).openapi()


# Loaded when the module is collected, so that each operation is a test of its own.
schema = schemathesis.openapi.from_dict(_served_schema())


def test_the_fuzzed_schema_is_the_one_the_coordinator_serves(eng: Engine, auth: dict[str, str]) -> None:
    served = httpx.get(f"{eng.settings.coordinator_url}/openapi.json", headers=auth, timeout=20).json()
    assert served == _served_schema()


@schema.parametrize()
@schema.given(known=st.booleans())
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_operation_answers_without_5xx_and_as_its_schema_says(
    case: schemathesis.Case, known: bool, known_project: str, auth: dict[str, str], eng: Engine
) -> None:
    if known and case.path_parameters and "project_id" in case.path_parameters:
        case.path_parameters["project_id"] = known_project
        if case.query and "follow" in case.query:
            # Following a live project's events is a stream that stays open until it ends (an
            # unknown project's answers 404 at once, so that case keeps what was drawn).
            case.query["follow"] = False
    case.call_and_validate(base_url=eng.settings.coordinator_url, headers=auth, checks=CHECKS, timeout=30)
