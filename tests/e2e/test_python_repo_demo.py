"""`bash scripts/demo.sh python-repo`: examples/python-repo, offline against the scripted model.
Its setup installs tinyslug from the loopback index once, through the registries proxy; the
iteration imports it with no network; the index the demo started is stopped at the end."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.stack import run_example_demo

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


def test_the_python_repo_demo_installs_once_and_its_tests_pass(tmp_path: Path) -> None:
    output = run_example_demo("python-repo", tmp_path)
    assert "completed: python-repo" in output
    assert "tool_executed        bash ok: exit code 0" in output
    # .venv is the environment's, never part of the agent's commit
    assert "files changed: tests/test_count_words.py, textkit/__init__.py" in output
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", 38765)) != 0
