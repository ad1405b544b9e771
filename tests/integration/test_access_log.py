"""The coordinator's access log never carries a query string (a repo URL may hold a credential)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from tests.support.engine import engine

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-token-in-url"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_credential_in_a_query_string_is_not_logged(tmp_path: Path) -> None:
    access = logging.getLogger("uvicorn.access")
    lines = _Lines()
    level = access.level
    try:
        with engine({"responses": [{"content": [{"type": "text", "text": "unused"}]}]}, tmp_path) as eng:
            # After the server started: its logging config replaced the logger's handlers and level.
            access.addHandler(lines)
            access.setLevel(logging.INFO)
            token = eng.settings.api_token.get_secret_value()
            answer = httpx.post(
                f"{eng.settings.coordinator_url}/v1/projects",
                params={"repo": f"https://user:{SECRET}@127.0.0.1:9/repo.git"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
    finally:
        access.removeHandler(lines)
        access.setLevel(level)
    assert answer.status_code >= 400, answer.text
    logged = [line for line in lines.lines if "/v1/projects" in line]
    assert logged, f"the request was not logged at all: {lines.lines}"
    assert not any(SECRET in line for line in lines.lines), logged
