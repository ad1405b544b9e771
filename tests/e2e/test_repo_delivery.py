"""Delivery end to end (issue #14): a project submitted from a repository on the tests' git server
(``raas submit --repo URL --ref main`` through the CLI) runs real iterations on the scripted model
in a coordinator and a worker process (Docker sandbox), and the coordinator's ``raas.deliver``
task pushes its task branches and its project branch over smart HTTP with the stored credential
and opens one pull request on the fake forge, whose receipt carries the iterations' tokens and
cost as ``raas cost --json`` reports them and says why the run ended.

Every wait is bounded and names what it waited for: a delivery that is never consumed (or a git
push waiting on a prompt) fails in a minute with the delivery rows in the message, not at the
suite's timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from shared import events
from shared.models import PauseReason, ProjectStatus
from tests.support.delivery import (
    REPO,
    World,
    delivery_world,
    done_step,
    ended,
    events_of,
    project_row,
    wait_delivered,
    workspace,
    write_step,
)
from tests.support.faults import wait_until
from tests.support.git_server import git
from tests.support.stack import RAAS
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


@pytest.fixture
def world(services: dict[str, str], tmp_path: Path) -> Iterator[World]:
    with delivery_world(tmp_path) as world:
        yield world


# Two tasks, one iteration each: write a file, then say the task is done (known usage per call).
TWO_TASKS_SCRIPT = {
    "responses": [
        write_step("api.py", "def api():\n    return 1\n", {"input_tokens": 1000, "output_tokens": 100}),
        done_step(
            "Added the API.", {"input_tokens": 1100, "output_tokens": 20, "cache_read_input_tokens": 500}
        ),
        write_step(
            "DOCS.md",
            "# Docs\n",
            {"input_tokens": 900, "output_tokens": 80, "cache_creation_input_tokens": 300},
        ),
        done_step("Documented it.", {"input_tokens": 950, "output_tokens": 15}),
    ],
    "when_exhausted": "error",
}
TWO_TASKS_TOML = """
name = "Add an API"
max_iterations = 2
max_tokens = 1000
[[tasks]]
id = "api"
title = "Write the API"
[[tasks]]
id = "docs"
title = "Document it"
depends_on = ["api"]
"""


def test_a_project_from_a_repository_delivers_its_branches_and_one_pull_request_with_the_receipt(
    world: World,
) -> None:
    # Given a coordinator and a worker, and a project submitted from the server's repository
    stack = world.stack(TWO_TASKS_SCRIPT)
    project_id = world.submit(stack, TWO_TASKS_TOML + world.delivery_toml("ready"))

    # When it runs to its end on the scripted model
    status = wait_until(lambda: ended(project_id), 120, "the project to end")
    # completed, then delivered once its pull request is open and followed ([delivery] follow)
    assert status in (ProjectStatus.COMPLETED, ProjectStatus.DELIVERED), stack.logs()
    wait_delivered(project_id, {"task:api", "task:docs", "project"}, stack)

    # Then each task's branch and the project's are on the remote, the base branch untouched
    bare = workspace(stack, project_id)
    head = git("rev-parse", "main", cwd=bare)
    branches = world.server.branches(REPO)
    assert branches[f"raas/{project_id}/project"] == head
    assert branches[f"raas/{project_id}/docs"] == head
    assert branches[f"raas/{project_id}/api"] == git("rev-parse", "main~1", cwd=bare)
    assert world.server.show(REPO, f"raas/{project_id}/api", "api.py") == "def api():\n    return 1"
    assert branches["main"] == git("rev-parse", "main~2", cwd=bare)

    # And exactly one pull request, from the project's branch to main, ready for review
    [pull] = world.forge.pulls(REPO)
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["draft"]) == (
        f"raas/{project_id}/project",
        "main",
        False,
    )
    assert pull["title"] == "Add an API: Added the API."
    # Its receipt is the iterations' usage and cost, as raas cost --json reports them
    cost = json.loads(stack.cli("cost", project_id, "--json").stdout)
    tokens = cost["tokens"]
    assert (tokens["input"], tokens["output"], tokens["cache_write"], tokens["cache_read"]) == (
        3950,
        215,
        300,
        500,
    )
    total = Decimal(str(cost["total_usd"]))
    assert total > 0
    counts = f"{tokens['input']} | {tokens['output']} | {tokens['cache_write']} | {tokens['cache_read']}"
    assert f"| **total** | | 2 | {counts} | ${total:.4f} |" in pull["body"]
    assert "| api | completed | 1 | 2100 | 120 | 0 | 500 |" in pull["body"]
    assert "**Completed**: every task is done." in pull["body"]
    assert f"raas status {project_id}" in pull["body"]
    # And the events say so, and raas status shows the pull request's address
    pushed = events_of(project_id, events.DELIVERY_PUSHED, events.PULL_REQUEST_OPENED, events.DELIVERY_FAILED)
    assert [e["type"] for e in pushed].count(events.DELIVERY_PUSHED) == 3
    assert [e["type"] for e in pushed][-1] == events.PULL_REQUEST_OPENED
    shown = stack.cli("status", project_id)
    assert f"delivery: project -> raas/{project_id}/project  delivered  {pull['html_url']}" in shown.stdout
    # And the credential went to git through the helper only: in no log
    assert world.server.password not in stack.logs()


# Each call costs about $0.009 on claude-sonnet-4-6: a $0.01 budget admits two, then pauses the run.
# $0.015 a call (2,000 x $3 + 600 x $15 per million): after two, the $0.02 left of $0.05 cannot
# pay a third's worst case even lowered to a floor-sized answer (1,000 tokens: max_tokens, $0.015,
# with its ~3,500 input tokens as the model counts them at $3.75 per million).
COSTLY = {"input_tokens": 2000, "output_tokens": 600}
BUDGET_SCRIPT = {
    "responses": [
        write_step("work.txt", "first half\n", COSTLY),
        write_step("more.txt", "second half\n", COSTLY),
        done_step("Finished the work.", {"input_tokens": 500, "output_tokens": 20}),
    ],
    "when_exhausted": "error",
}
BUDGET_TOML = """
name = "Do the work"
max_iterations = 3
max_tokens = 1000
[budget]
limit_usd = "0.05"
"""


def test_a_run_stopped_by_its_budget_delivers_a_draft_and_resuming_continues_on_the_same_branch(
    world: World,
) -> None:
    # Given a project from the repository with a budget of five cents
    stack = world.stack(BUDGET_SCRIPT)
    project_id = world.submit(stack, BUDGET_TOML + world.delivery_toml("ready"))

    # When its iterations spend it
    paused = wait_until(
        lambda: project_row(project_id).pause_reason == PauseReason.BUDGET_EXCEEDED, 120, "the budget pause"
    )
    assert paused, stack.logs()
    wait_delivered(project_id, {"project"}, stack)

    # Then what the agent wrote is on the project's branch, in a draft saying why the run stopped
    branch = f"raas/{project_id}/project"
    bare = workspace(stack, project_id)
    assert world.server.branches(REPO)[branch] == git("rev-parse", "main", cwd=bare)
    assert world.server.show(REPO, branch, "work.txt") == "first half"
    assert world.server.show(REPO, branch, "more.txt") == "second half"
    [pull] = world.forge.pulls(REPO)
    assert pull["draft"] is True
    assert pull["title"].startswith("[paused] Do the work")
    assert "**Stopped early** (paused): budget\\_exceeded: spent $0\\.03" in pull["body"]
    assert world.forge.comments(REPO, pull["number"]) == []

    # When the budget is raised (the run resumes) and the project completes
    raised = stack.cli("budget", project_id, "--limit", "5")
    assert raised.returncode == 0, raised.stderr
    status = wait_until(lambda: ended(project_id), 120, "the project to end")
    assert status == ProjectStatus.COMPLETED, stack.logs()
    wait_delivered(project_id, {"project"}, stack, round_=2)

    # Then the same branch moved on, and the same pull request says so in one comment
    assert world.server.branches(REPO)[branch] == git("rev-parse", "main", cwd=bare)
    [pull] = world.forge.pulls(REPO)
    assert "**Completed**" in pull["body"]
    [comment] = world.forge.comments(REPO, pull["number"])
    assert "**Completed**" in comment
    # (GitHub's REST API cannot mark the draft ready: the comment asks for it)
    assert pull["draft"] is True
    assert "It is still a draft" in comment
    cost = json.loads(stack.cli("cost", project_id, "--json").stdout)
    assert f"${Decimal(str(cost['total_usd'])):.4f} |" in comment
    opened = events_of(project_id, events.PULL_REQUEST_OPENED, events.PULL_REQUEST_UPDATED)
    assert [e["type"] for e in opened] == [events.PULL_REQUEST_OPENED, events.PULL_REQUEST_UPDATED]


def test_raas_run_delivers_before_it_exits_and_says_what_it_could_not(world: World, tmp_path: Path) -> None:
    # Given a project directory for raas run naming a repository anyone may push to, and asking
    # for a pull request (which needs a stored token: raas run has none)
    world.server.anonymous_read = world.server.anonymous_write = True
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "PROMPT.md").write_text("Do the work.\n")
    source = f'[source]\nrepo = "{world.url}"\nref = "main"\n'
    (directory / "raas.toml").write_text("max_iterations = 2\n" + source + world.delivery_toml("ready"))
    script = {"responses": [write_step("work.txt", "done\n", {"input_tokens": 10}), done_step("Did it.", {})]}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAAS_DATABASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "RAAS_SANDBOX")
    }

    # When it runs to its end
    with ScriptedModelServer(Script.model_validate(script)) as model:
        env |= {
            "RAAS_DATA_DIR": str(tmp_path / "data"),
            "ANTHROPIC_BASE_URL": model.base_url,
            "RAAS_SANDBOX": "local",
        }
        done = subprocess.run(
            [*RAAS, "run", str(directory)], env=env, capture_output=True, text=True, timeout=180, check=False
        )

    # Then the branches were pushed before the process exited
    assert done.returncode == 0, done.stdout + done.stderr
    bare = next((tmp_path / "data" / "workspaces").glob("*.git"))
    head = git("rev-parse", "main", cwd=bare)
    branches = world.server.branches(REPO)
    [project_branch] = [b for b in branches if b.endswith("/project")]
    assert branches[project_branch] == head
    assert world.server.show(REPO, project_branch, "work.txt") == "done"
    # And the pull request it could not open is said on stderr, with how to push by hand
    assert world.forge.pulls(REPO) == []
    [line] = [row for row in done.stderr.splitlines() if row.startswith(f"delivery of {project_branch}")]
    assert "failed: opening the pull request needs a token" in line
    assert f"git -C {bare} push {world.url} main:refs/heads/{project_branch}" in line
