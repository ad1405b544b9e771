"""``raas eval import-swebench`` (issue #27, point 1) with real git, without services or Docker.

Instances become tasks of a suite that loads; each workspace is its repository at the base
commit, taken from the local clone, with no line of the test patch in it; the hidden test puts
back the files the test patch touches before applying it, so an agent's edits to them do not
count. Bad input is one line naming the instance and the problem, and nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.evals.suite import load_suite
from orchestrator.evals.swebench import patched_paths, task_key
from shared.errors import InvalidInput
from tests.support.swebench_repos import (
    CALC,
    TEST_COMMAND,
    TEST_PATCH_MARKS,
    Fixture,
    make_fixture,
    write_jsonl,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def fixture(tmp_path: Path) -> Fixture:
    return make_fixture(tmp_path / "in")


def _import(fixture: Fixture, out: Path, jsonl: Path | None = None) -> Result:
    args = ["eval", "import-swebench", str(jsonl or fixture.jsonl), "--repos", str(fixture.repos)]
    return CliRunner().invoke(app, [*args, "--out", str(out), "--test-command", TEST_COMMAND])


def test_instances_become_a_suite_of_tasks_at_their_base_commits(fixture: Fixture, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    result = _import(fixture, out)
    assert result.exit_code == 0, result.output
    suite = load_suite(out)
    assert suite.name == "suite"
    assert [t.key for t in suite.tasks] == ["acme-calc-1", "acme-calc-2", "widgets-text-7"]
    first = out / "acme-calc-1"
    # The repository at the base commit (the bug, not the later README), from the local clone.
    assert (first / "workspace" / "calc.py").read_text() == CALC
    assert (first / "workspace" / "README.md").read_text() == "calc\n"
    assert (out / "widgets-text-7" / "workspace" / "README.md").read_text() == "text\n"
    assert (first / "instruction.md").read_text() == (
        "add(2, 3) returns -1; it should return 5.\n\n## Hints\n\nLook at the operator in add.\n"
    )
    meta = {t.key: t.meta for t in suite.tasks}
    assert (meta["acme-calc-1"].difficulty, meta["acme-calc-2"].difficulty) == ("easy", "medium")
    assert meta["widgets-text-7"].difficulty == "hard"
    assert meta["widgets-text-7"].tags == ["swebench", "widgets/text"]
    # The gold patch is the oracle's; the test patch, the ids and the command are the hidden test's.
    assert (first / "solution" / "fix.patch").read_text() == fixture.records[0]["patch"]
    assert (first / "tests" / "test.patch").read_text() == fixture.records[0]["test_patch"]
    test_sh = (first / "tests" / "test.sh").read_text()
    assert 'python3 -m unittest "${test_ids[@]}"' in test_sh
    assert "test_ids=(test_calc.TestAdd.test_add test_calc.TestMul.test_mul)" in test_sh
    assert (
        "test_ids=(test_text.TestShout.test_shout)"
        in (out / "widgets-text-7" / "tests" / "test.sh").read_text()
    )
    # Nothing else beside the suite: the temporary folder was renamed into place.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "suite"]


def test_no_workspace_holds_any_of_the_test_patches_content(fixture: Fixture, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    assert _import(fixture, out).exit_code == 0
    for task in out.iterdir():
        if not task.is_dir():
            continue
        for path in (task / "workspace").rglob("*"):
            if path.is_file():
                text = path.read_text()
                assert not [m for m in TEST_PATCH_MARKS if m in text], path
        assert not (task / "workspace" / "test_neg.py").exists()
        assert not (task / "workspace" / "test_text.py").exists()
    # ...while each test patch does carry its mark (the check above could fail).
    assert "HIDDEN_SWEBENCH_ADD" in (out / "acme-calc-1" / "tests" / "test.patch").read_text()


def test_the_hidden_test_restores_test_files_an_agent_edited_before_applying_the_patch(
    fixture: Fixture, tmp_path: Path
) -> None:
    out = tmp_path / "suite"
    assert _import(fixture, out).exit_code == 0
    task = out / "acme-calc-1"
    work = tmp_path / "work"
    shutil.copytree(task / "workspace", work)
    env = {**os.environ, "RAAS_TESTS_DIR": str(task / "tests"), "PYTHONDONTWRITEBYTECODE": "1"}

    def run(script: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, check=False
        )

    assert run(task / "tests" / "test.sh").returncode != 0  # unsolved
    shutil.rmtree(work)
    shutil.copytree(task / "workspace", work)
    assert run(task / "solution" / "solve.sh").returncode == 0
    # The "agent" rewrote the test file the test patch touches; the hidden test puts it back.
    (work / "test_calc.py").write_text("raise SystemExit('tampered')\n")
    done = run(task / "tests" / "test.sh")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 2 tests" in done.stderr
    assert "HIDDEN_SWEBENCH_ADD" in (work / "test_calc.py").read_text()


def _bad(fixture: Fixture, tmp_path: Path, records: list[dict[str, object]] | str) -> str:
    jsonl = tmp_path / "bad.jsonl"
    if isinstance(records, str):
        jsonl.write_text(records)
    else:
        write_jsonl(jsonl, records)
    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _import(fixture, out, jsonl)
    assert result.exit_code != 0
    assert isinstance(result.exception, InvalidInput)
    message = str(result.exception)
    assert len(message.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no leftovers
    return message


def test_bad_input_is_one_line_naming_the_instance_and_nothing_is_written(
    fixture: Fixture, tmp_path: Path
) -> None:
    good = fixture.records
    missing = [dict(good[0]), {k: v for k, v in good[1].items() if k != "test_patch"}]
    assert _bad(fixture, tmp_path, missing) == (
        "bad.jsonl line 2: missing field 'test_patch'; every instance needs instance_id, repo, "
        "base_commit, problem_statement, patch, test_patch, FAIL_TO_PASS"
    )
    not_json = json.dumps(good[0]) + "\n{not json\n"
    assert _bad(fixture, tmp_path, not_json).startswith("bad.jsonl line 2: not JSON (")
    elsewhere = [dict(good[0]), {**good[2], "repo": "widgets/nowhere"}]
    assert _bad(fixture, tmp_path, elsewhere).startswith(
        "bad.jsonl line 2 (widgets__text-7): repository widgets/nowhere not found under "
    )
    no_commit = [{**good[0], "base_commit": "0" * 40}]
    assert _bad(fixture, tmp_path, no_commit) == (
        f"bad.jsonl line 1 (acme__calc-1): {fixture.repos / 'acme__calc'} has no commit {'0' * 40}; "
        "fetch it into that clone first"
    )
    duplicate = [good[0], good[2], {**good[1], "instance_id": "ACME__calc-1"}]
    assert _bad(fixture, tmp_path, duplicate).startswith(
        "bad.jsonl line 3 (ACME__calc-1): duplicate instance id "
        "(task 'acme-calc-1', as 'acme__calc-1' before)"
    )
    no_tests = [{**good[0], "FAIL_TO_PASS": "[]"}]
    assert _bad(fixture, tmp_path, no_tests) == (
        "bad.jsonl line 1 (acme__calc-1): FAIL_TO_PASS is empty; at least one test must decide success"
    )


def test_an_existing_suite_folder_is_refused_and_left_as_it_was(fixture: Fixture, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    out.mkdir()
    (out / "mine.txt").write_text("keep\n")
    result = _import(fixture, out)
    assert isinstance(result.exception, InvalidInput)
    assert str(result.exception).startswith(f"{out} exists; give --out a new folder")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_task_ids_and_patched_paths() -> None:
    assert task_key("astropy__astropy-12907") == "astropy-astropy-12907"
    assert task_key("Django__Django-11_099") == "django-django-11-099"
    assert task_key("__--__") == ""
    patch = (
        "diff --git a/t/x.py b/t/x.py\n--- a/t/x.py\n+++ b/t/x.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+c\n"
    )
    assert patched_paths(patch) == ["t/x.py", "new.py"]
