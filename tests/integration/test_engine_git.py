"""Every iteration that changes the workspace is one commit, authored by its agent (DESIGN.md rule 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import events
from tests.support.engine import engine
from tests.support.records import agent, event_log, iterations, text, tool, workspace_git

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_each_iteration_is_a_commit_authored_by_its_agent(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            tool("write", {"path": "a.txt", "content": "a\n"}),
            text("Wrote a.txt."),
            tool("bash", {"command": "mkdir -p src && echo b > src/b.txt && rm old.txt"}),
            text("Wrote src/b.txt, removed old.txt."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"old.txt": "old\n"})
        eng.run_next(project_id)
        eng.run_next(project_id)

        first, second = iterations(project_id)[:2]
        assert first.files_changed == ["a.txt"]
        assert sorted(second.files_changed) == ["old.txt", "src/b.txt"]
        assert second.base_sha == first.commit_sha
        log = workspace_git(eng, project_id, "log", "--format=%H %an <%ae>|%s", "main").splitlines()
        author = f"agent-{agent(project_id).id}"
        assert log[:2] == [
            f"{second.commit_sha} {author} <{author}@constellation.local>|Iteration 2: test",
            f"{first.commit_sha} {author} <{author}@constellation.local>|Iteration 1: test",
        ]
        assert log[2].endswith("|Initial workspace")
        assert workspace_git(eng, project_id, "show", "main:src/b.txt") == "b"


def test_an_iteration_that_changes_nothing_makes_no_commit(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [tool("read", {"path": "notes.txt"}), text("Read it; nothing to change.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "keep\n"})
        initial = workspace_git(eng, project_id, "rev-parse", "main")
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.base_sha, row.commit_sha, row.files_changed) == (initial, initial, [])
        assert workspace_git(eng, project_id, "rev-parse", "main") == initial
        assert workspace_git(eng, project_id, "rev-list", "--count", "main") == "1"


LITTER = " && ".join(
    [
        "python3 -m venv --without-pip .venv",
        "mkdir -p pkg/__pycache__ node_modules/left .pytest_cache",
        "echo 'x = 1' > pkg/m.py",
        "echo c > pkg/__pycache__/m.cpython-311.pyc",
        "echo c > stray.pyc",
        "echo j > node_modules/left/index.js",
        "echo p > .pytest_cache/README.md",
        "echo l > run.log",
    ]
)


@pytest.mark.parametrize(
    ("files", "raas_toml", "committed"),
    [
        pytest.param({}, "", ["pkg/m.py", "run.log"], id="no-gitignore-defaults-apply"),
        pytest.param(
            {".gitignore": "*.log\n.venv/\n"},
            "",
            [
                ".gitignore",
                ".pytest_cache/README.md",
                "node_modules/left/index.js",
                "pkg/__pycache__/m.cpython-311.pyc",
                "pkg/m.py",
                "stray.pyc",
            ],
            id="the-projects-own-gitignore-decides-alone",
        ),
        pytest.param(
            {},
            'default_ignore = ["*.log", ".venv/"]',
            [
                ".pytest_cache/README.md",
                "node_modules/left/index.js",
                "pkg/__pycache__/m.cpython-311.pyc",
                "pkg/m.py",
                "stray.pyc",
            ],
            id="raas-toml-sets-the-defaults",
        ),
    ],
)
def test_build_litter_stays_out_of_an_agents_commit(
    services: dict[str, str], tmp_path: Path, files: dict[str, str], raas_toml: str, committed: list[str]
) -> None:
    # Given an agent that leaves a venv, bytecode, node_modules and a test cache behind
    script = {"responses": [tool("bash", {"command": LITTER}), text("Built and tested.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=raas_toml, files=files)
        # When its iteration is committed
        eng.run_next(project_id)

        # Then the commit holds what the ignore rules let through, and no .gitignore was added
        row = iterations(project_id)[0]
        assert row.error is None
        tree = workspace_git(eng, project_id, "ls-tree", "-r", "--name-only", "main").splitlines()
        assert tree == committed
        assert sorted(row.files_changed) == [name for name in committed if name not in files]


def test_the_agent_works_in_a_repository_of_its_own_on_main_with_the_projects_history(
    services: dict[str, str], tmp_path: Path
) -> None:
    look = {"command": "git status --porcelain -b && echo remotes: $(git remote) && git log --format=%s"}
    script = {
        "responses": [
            tool("write", {"path": "a.txt", "content": "a\n"}),
            tool("bash", look),
            text("Wrote a.txt."),
            tool("bash", look),
            text("Looked."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "keep\n"})
        eng.run_next(project_id)
        eng.run_next(project_id)

        outputs = [e.data["output"].splitlines() for e in event_log(project_id, events.TOOL_EXECUTED)]
        looks = [lines for lines in outputs if lines[:1] == ["exit code 0"]]
        # On main, no remote to reach the host by, the history the host holds, the agent's
        # own changes seen against it; the next iteration starts clean from the commit.
        assert looks == [
            ["exit code 0", "## main", "?? a.txt", "remotes:", "Initial workspace"],
            ["exit code 0", "## main", "remotes:", "Iteration 1: test", "Initial workspace"],
        ]
