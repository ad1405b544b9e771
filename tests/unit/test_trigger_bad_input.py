"""Bad input to ``raas trigger add`` (issue #24): a cron that does not parse, a template field the
source lacks, a repository URL that is not http(s), a ``--dir`` that is not a directory — one line
naming it, a non-zero exit, and nothing sent (the coordinator named here does not exist: a request
would fail differently)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bad_input import assert_one_line_error

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "prompt", "named"),
    [
        (["--source", "schedule", "--cron", "61 * * * *"], "Tidy up.", "cron '61 * * * *' does not parse"),
        (["--source", "schedule", "--cron", "0 3 * * *"], "Fix {{ issue.title }}", "{{ issue.title }}"),
        (
            ["--source", "github", "--repo", "file:///srv/app.git"],
            "Fix {{ issue.title }}",
            "not an http(s) URL",
        ),
        (
            ["--source", "webhook", "--dir", "/nonexistent/ops"],
            "Go.",
            "--dir: /nonexistent/ops is not a directory",
        ),
    ],
)
def test_a_bad_trigger_is_refused_in_one_line_and_nothing_is_sent(
    tmp_path: Path, args: list[str], prompt: str, named: str
) -> None:
    prompt_file = tmp_path / "PROMPT.md"
    prompt_file.write_text(prompt)
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    env = {**os.environ, "RAAS_COORDINATOR_URL": "http://127.0.0.1:9"}
    command = ["trigger", "add", "t1", "--prompt-file", str(prompt_file), "--secret-file", str(secret)]
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *command, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert_one_line_error(result, named)
    assert "does not answer" not in result.stderr
