"""`bash scripts/demo.sh node-repo`: examples/node-repo, offline against the scripted model.
Its base image is built from the sandbox image and the host's node (examples/scripts/node_image.sh);
its setup runs `npm ci` once from the vendored tarball; the iteration requires tinypad and runs
`npm test` with no network, and node_modules never reaches the commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.stack import run_example_demo

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


def test_the_node_repo_demo_installs_once_and_its_tests_pass(tmp_path: Path) -> None:
    output = run_example_demo("node-repo", tmp_path)
    assert "completed: node-repo" in output
    # The first command found tinypad where the setup put it (require.resolve fails otherwise),
    # and the suite passed
    lines = output.splitlines()
    first = next(i for i, line in enumerate(lines) if "require.resolve('tinypad')" in line)
    executed = next(line for line in lines[first:] if "tool_executed" in line)
    assert executed.endswith("tool_executed        bash ok: exit code 0"), executed
    # node_modules is the environment's, never part of the agent's commit
    assert "files changed: index.js, test/center.test.js" in output
