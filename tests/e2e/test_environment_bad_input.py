"""Bad input in a project's environment, through `raas submit`: one line naming it, a non-zero
exit, nothing written (issue #26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bad_input import assert_one_line_error, coordinator_state
from tests.support.stack import ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def coordinator(
    database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    stack = Stack(
        log_dir=tmp_path_factory.mktemp("env-bad-input"), script=ROOT_DIR / "examples/scripts/hello.json"
    )
    stack.start(workers=0)
    yield stack
    stack.stop()


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({"raas.toml": '[environment]\nnetwork = "internet"\n'}, ("environment.network", "'internet'")),
        ({"raas.toml": '[environment]\nkey_files = ["../uv.lock"]\n'}, ("key file '../uv.lock' is outside",)),
        ({".raas/environment.toml": 'setup_network = "open"\n'}, (".raas/environment.toml: setup_network",)),
    ],
)
def test_a_bad_environment_is_refused_in_one_line_and_nothing_is_written(
    coordinator: Stack, tmp_path: Path, files: dict[str, str], named: tuple[str, ...]
) -> None:
    before = coordinator_state(coordinator)
    (tmp_path / "PROMPT.md").write_text("do it\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = coordinator.cli("submit", str(tmp_path))
    assert_one_line_error(result, *named)
    assert coordinator_state(coordinator) == before
