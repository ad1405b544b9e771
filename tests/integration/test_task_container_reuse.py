"""A task's second iteration runs in the container its first one left (issue #26 point 4), through
the worker's own iteration runner, the coordinator's API (git bundles over HTTP) and Docker: what
git ignores and /tmp carry over; every other workspace file is the base commit's, whatever a
failed attempt left behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import docker
import pytest
from sqlalchemy import select

from orchestrator.scheduling import advance
from shared.db import session_scope
from shared.models import Event
from tests.support.engine import engine
from tests.support.records import text, tool
from workers.iteration import IterationRunner
from workers.sandbox.keeper import TaskContainers
from workers.sandbox.sweeper import cluster_id

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CID = "echo cid=$(grep -o 'containers/[0-9a-f]*/hostname' /proc/self/mountinfo | head -1 | cut -d/ -f2)"
FIRST = f"mkdir -p cache && echo built > cache/out && echo run >> /tmp/runs && {CID}"
SECOND = (
    f"echo cache=$(cat cache/out); echo runs=$(wc -l < /tmp/runs); echo tracked=$(cat tracked.txt); "
    f"echo files=$(ls -A | grep -v '^.git$' | tr '\\n' ,); {CID}"
)
SCRIPT = {
    "responses": [
        tool("bash", {"command": FIRST}),
        text("Built; more next time."),
        tool("bash", {"command": SECOND}),
        text("Looked."),
    ],
    "when_exhausted": "repeat_last",
}
RAAS_TOML = "max_iterations = 5\nmax_turns = 4\n[circuit_breaker]\nmax_no_progress = 6\n"


def bash_outputs(project_id: str) -> list[dict[str, str]]:
    with session_scope() as session:
        rows = session.scalars(
            select(Event.data)
            .where(Event.project_id == project_id, Event.type == "tool_executed")
            .order_by(Event.seq)
        ).all()
    return [
        dict(re.findall(r"^(\w+)=(.*)$", d["output"], re.MULTILINE)) for d in rows if d.get("tool") == "bash"
    ]


def test_the_second_iteration_reuses_the_container_with_ignored_files_kept_and_the_rest_reset(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine(SCRIPT, tmp_path) as eng:
        keeper = TaskContainers(600, cluster_id(eng.settings.database_url), "test-worker")
        runner = IterationRunner(eng.settings, eng.bus, "test-worker", keeper=keeper)
        client = docker.from_env()
        try:
            project_id = eng.submit(
                raas_toml=RAAS_TOML, files={".gitignore": "cache/\n", "tracked.txt": "v1\n"}
            )
            # Given the first iteration, which built into the ignored cache/ and /tmp
            first = eng.dispatcher.take(project_id)
            assert first is not None
            assert runner.run(first) is not None
            advance.advance(project_id, first, eng.dispatcher, eng.bus)
            (parked,) = keeper.parked().values()
            # And what a failed attempt would leave in its workspace: a tracked file changed and an
            # untracked one, neither committed
            mounts = client.api.inspect_container(parked)["Mounts"]
            workspace = Path(next(m["Source"] for m in mounts if m["Destination"] == "/workspace"))
            (workspace / "tracked.txt").write_text("dirty\n")
            (workspace / "stale.txt").write_text("from a failed attempt\n")

            # When the task's next iteration runs on the same worker
            second = eng.dispatcher.take(project_id)
            assert second is not None
            assert runner.run(second) is not None

            # Then it ran in the same container: its /tmp and the ignored cache are as left
            one, two = bash_outputs(project_id)
            assert one["cid"] == two["cid"] == parked
            assert (two["cache"], two["runs"]) == ("built", "1")
            # And every other file is the base commit's: the change undone, the stray file gone
            assert two["tracked"] == "v1"
            # (PROMPT.md and raas.toml are the project's, not the agent's workspace's)
            assert two["files"] == ".gitignore,cache,tracked.txt,"
            # And the container was parked again for the task, and nothing else was started
            assert list(keeper.parked().values()) == [parked]
        finally:
            runner.close()
            client.close()
        assert keeper.parked() == {}
