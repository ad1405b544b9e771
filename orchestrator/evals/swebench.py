"""SWE-bench-style instances imported into an eval suite (issue #27, point 1), offline.

Each line of the JSONL (SWE-bench's fields: ``instance_id``, ``repo`` "owner/name",
``base_commit``, ``problem_statement``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``; optional ``hints_text``, ``difficulty``) becomes one task of the suite
(:mod:`orchestrator.evals.suite`):

```
<task>/workspace/          the repository at base_commit (git archive of the LOCAL clone)
<task>/instruction.md      the problem statement, and the hints if given
<task>/solution/fix.patch  the gold patch; solve.sh applies it (git apply, or patch -p1)
<task>/tests/test.patch    the test patch: only here, never in the workspace
<task>/tests/base/...      the base versions of the files it touches (put back before applying)
<task>/tests/test.sh       applies test.patch, runs FAIL_TO_PASS + PASS_TO_PASS (all must pass)
<task>/task.toml           difficulty, tags (swebench, the repo), limits
```

Everything is checked before anything is written (every line parses, has its fields, names a
repository found under ``--repos`` as ``<owner>__<name>`` or ``<owner>/<name>`` holding the base
commit, ids unique); the suite is built in a temporary folder beside ``--out`` and renamed into
place at the end, so bad input leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.evals.suite import INSTRUCTION_FILE, SUITE_FILE, TASK_FILE, TASK_ID
from shared.archive import unpack
from shared.errors import InvalidInput

DEFAULT_TEST_COMMAND = "python3 -m pytest -q"
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS")
# A SWE-bench task is a real repository's issue: more room than a hand-written suite's default.
TIME_LIMIT_S = 1800
BUDGET_USD = "2.00"
# SWE-bench Verified's annotators' estimates, and the suite's own words.
DIFFICULTIES = {
    "<15 min fix": "easy",
    "15 min - 1 hour": "medium",
    "1-4 hours": "hard",
    ">4 hours": "hard",
    "easy": "easy",
    "medium": "medium",
    "hard": "hard",
}
_PATCH_PATH = re.compile(r"^(?:--- a/|\+\+\+ b/|rename from |rename to |copy from |copy to )(.+?)\s*$")
_GIT_TIMEOUT_S = 600


@dataclass(frozen=True)
class Instance:
    instance_id: str
    key: str  # the task's folder name
    repo: str
    base_commit: str
    problem_statement: str
    hints: str
    patch: str
    test_patch: str
    test_ids: tuple[str, ...]  # FAIL_TO_PASS, then PASS_TO_PASS
    difficulty: str
    source: Path  # the local repository


def task_key(instance_id: str) -> str:
    """The task's folder name: the id lowercased, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", instance_id.lower()).strip("-")[:100].rstrip("-")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        timeout=_GIT_TIMEOUT_S,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )


def _find_repo(repos: Path, repo: str, where: str) -> Path:
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name or ".." in (owner, name):
        msg = f'{where}: repo {repo!r} is not "owner/name"'
        raise InvalidInput(msg)
    candidates = (repos / f"{owner}__{name}", repos / owner / name)
    for path in candidates:
        if path.is_dir() and _git(path, "rev-parse", "--git-dir").returncode == 0:
            return path
    msg = (
        f"{where}: repository {repo} not found under {repos} (looked for {candidates[0].name}/ and "
        f"{owner}/{name}/, each a git clone); clone it there first"
    )
    raise InvalidInput(msg)


def _id_list(value: Any, field: str, where: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            msg = f"{where}: {field} is a string but not a JSON-encoded list of test ids"
            raise InvalidInput(msg) from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        msg = f"{where}: {field} must be a list of test ids (or one JSON-encoded as SWE-bench ships it)"
        raise InvalidInput(msg)
    return value


def _text(record: dict[str, Any], field: str, where: str) -> str:
    value = record.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        msg = f"{where}: missing field {field!r}; every instance needs {', '.join(REQUIRED)}"
        raise InvalidInput(msg)
    if not isinstance(value, str):
        msg = f"{where}: {field} must be a string, not {type(value).__name__}"
        raise InvalidInput(msg)
    return value


def _instance(record: Any, where: str, repos: Path) -> Instance:
    if not isinstance(record, dict):
        msg = f"{where}: not a JSON object; each line is one instance"
        raise InvalidInput(msg)
    fields = {name: _text(record, name, where) for name in REQUIRED if name != "FAIL_TO_PASS"}
    instance_id = fields["instance_id"]
    where = f"{where} ({instance_id})"
    key = task_key(instance_id)
    if not TASK_ID.match(key):
        msg = f"{where}: instance_id gives no usable task id (letters or digits needed)"
        raise InvalidInput(msg)
    fail_to_pass = _id_list(record.get("FAIL_TO_PASS"), "FAIL_TO_PASS", where)
    if not fail_to_pass:
        msg = f"{where}: FAIL_TO_PASS is empty; at least one test must decide success"
        raise InvalidInput(msg)
    pass_to_pass = _id_list(record.get("PASS_TO_PASS"), "PASS_TO_PASS", where)
    raw_difficulty = record.get("difficulty") or "medium"
    difficulty = DIFFICULTIES.get(str(raw_difficulty).strip().lower())
    if difficulty is None:
        msg = f"{where}: difficulty {raw_difficulty!r} is not one of {', '.join(map(repr, DIFFICULTIES))}"
        raise InvalidInput(msg)
    hints = record.get("hints_text") or ""
    if not isinstance(hints, str):
        msg = f"{where}: hints_text must be a string"
        raise InvalidInput(msg)
    source = _find_repo(repos, fields["repo"], where)
    commit = fields["base_commit"].strip()
    if _git(source, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").returncode != 0:
        msg = f"{where}: {source} has no commit {commit}; fetch it into that clone first"
        raise InvalidInput(msg)
    return Instance(
        instance_id=instance_id,
        key=key,
        repo=fields["repo"],
        base_commit=commit,
        problem_statement=fields["problem_statement"],
        hints=hints,
        patch=fields["patch"],
        test_patch=fields["test_patch"],
        test_ids=tuple(dict.fromkeys([*fail_to_pass, *pass_to_pass])),
        difficulty=difficulty,
        source=source,
    )


def read_instances(jsonl: Path, repos: Path) -> list[Instance]:
    """Every instance of ``jsonl``, each checked against the local repositories under ``repos``.

    Raises:
        InvalidInput: the first line that is not JSON, lacks a field, names a repository not under
            ``repos`` or a base commit it lacks, or repeats an instance id (one line naming it).
    """
    try:
        lines = jsonl.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{jsonl}: cannot read it ({getattr(exc, 'strerror', None) or 'not UTF-8 text'})"
        raise InvalidInput(msg) from exc
    instances: dict[str, Instance] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{jsonl.name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            msg = f"{where}: not JSON ({exc.msg}); each line is one instance as a JSON object"
            raise InvalidInput(msg) from None
        instance = _instance(record, where, repos)
        if instance.key in instances:
            first = instances[instance.key].instance_id
            msg = (
                f"{where} ({instance.instance_id}): duplicate instance id "
                f"(task {instance.key!r}, as {first!r} before); each instance once"
            )
            raise InvalidInput(msg)
        instances[instance.key] = instance
    if not instances:
        msg = f"{jsonl}: no instances; each line is one SWE-bench-style instance as a JSON object"
        raise InvalidInput(msg)
    return list(instances.values())


def patched_paths(patch: str) -> list[str]:
    """The paths a unified diff touches (both sides of a rename), in order of appearance."""
    found = (m.group(1) for line in patch.splitlines() if (m := _PATCH_PATH.match(line)))
    return list(dict.fromkeys(p for p in found if p != "/dev/null"))


def _export(instance: Instance, dest: Path) -> None:
    """The repository at the base commit into ``dest``, from the local clone (no network)."""
    done = _git(instance.source, "archive", "--format=tar", instance.base_commit)
    if done.returncode != 0:
        msg = f"{instance.instance_id}: git archive failed: {done.stderr.decode(errors='replace').strip()}"
        raise InvalidInput(msg)
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as tar:
        unpack(tar, dest)


_APPLY = """if command -v git >/dev/null 2>&1; then
  git apply --whitespace=nowarn {patch}
else
  patch -p1 --forward --batch < {patch}
fi"""

_SOLVE = """#!/usr/bin/env bash
# The oracle of {instance_id}: the instance's gold patch. cwd = the workspace (maybe not a git repo).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
{apply}
"""

_TEST = """#!/usr/bin/env bash
# The hidden test of {instance_id} (imported from a SWE-bench-style instance). cwd = the final
# workspace; the test patch and the base versions of the files it touches live in $RAAS_TESTS_DIR.
# Exit 0 = every FAIL_TO_PASS and PASS_TO_PASS test passes.
set -u
tests="${{RAAS_TESTS_DIR:-$(cd "$(dirname "$0")" && pwd)}}"
# The files the test patch touches go back to the base commit's (the agent may have edited them).
for path in {paths}; do
  if [ -e "$tests/base/$path" ]; then
    mkdir -p "$(dirname "$path")" && cp "$tests/base/$path" "$path"
  else
    rm -f "$path"
  fi
done
{apply} || {{ echo "the test patch does not apply to the workspace"; exit 1; }}
test_ids=({ids})
{command} "${{test_ids[@]}}"
"""


def _task_toml(instance: Instance) -> str:
    tags = json.dumps(["swebench", instance.repo])
    return (
        f"# Imported from SWE-bench-style instance {instance.instance_id} ({instance.repo} at "
        f"{instance.base_commit}).\n[task]\ndifficulty = {json.dumps(instance.difficulty)}\n"
        f"tags = {tags}\ntime_limit_s = {TIME_LIMIT_S}\nbudget_usd = {BUDGET_USD}\n"
    )


def _write_task(instance: Instance, task: Path, test_command: str) -> None:
    _export(instance, task / "workspace")
    instruction = instance.problem_statement.rstrip() + "\n"
    if instance.hints.strip():
        instruction += f"\n## Hints\n\n{instance.hints.rstrip()}\n"
    (task / INSTRUCTION_FILE).write_text(instruction, encoding="utf-8")
    (task / TASK_FILE).write_text(_task_toml(instance), encoding="utf-8")
    solution, tests = task / "solution", task / "tests"
    solution.mkdir()
    tests.mkdir()
    (solution / "fix.patch").write_text(instance.patch, encoding="utf-8")
    apply_fix = _APPLY.format(patch='"$here/fix.patch"')
    (solution / "solve.sh").write_text(_SOLVE.format(instance_id=instance.instance_id, apply=apply_fix))
    (tests / "test.patch").write_text(instance.test_patch, encoding="utf-8")
    paths = patched_paths(instance.test_patch)
    for rel in paths:
        original = task / "workspace" / rel
        if original.is_file() and not original.is_symlink():
            (tests / "base" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(original, tests / "base" / rel)
    script = _TEST.format(
        instance_id=instance.instance_id,
        paths=" ".join(shlex.quote(p) for p in paths) or "",
        apply=_APPLY.format(patch='"$tests/test.patch"'),
        ids=" ".join(shlex.quote(i) for i in instance.test_ids),
        command=test_command,
    )
    (tests / "test.sh").write_text(script)
    for name in (solution / "solve.sh", tests / "test.sh"):
        name.chmod(0o755)


def import_swebench(
    jsonl: Path, repos: Path, out: Path, test_command: str = DEFAULT_TEST_COMMAND
) -> list[Instance]:
    """Write the suite ``out`` from the instances of ``jsonl``; the instances imported.

    Raises:
        InvalidInput: ``out`` exists, ``repos`` is not a folder, an empty test command, or any
            instance that does not check (:func:`read_instances`); nothing is written.
    """
    out = out.absolute()
    if out.exists():
        msg = f"{out} exists; give --out a new folder (the suite is written whole or not at all)"
        raise InvalidInput(msg)
    if not repos.is_dir():
        msg = f"--repos {repos}: not a folder; give the folder holding the local clones"
        raise InvalidInput(msg)
    if not test_command.strip():
        msg = "--test-command is empty; give the command the test ids are appended to"
        raise InvalidInput(msg)
    instances = read_instances(jsonl, repos)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.importing-", dir=out.parent))
    try:
        description = f"{len(instances)} SWE-bench-style instance(s) imported from {jsonl.name}"
        (tmp / SUITE_FILE).write_text(
            f"[suite]\nname = {json.dumps(out.name)}\ndescription = {json.dumps(description)}\n"
        )
        for instance in instances:
            task = tmp / instance.key
            task.mkdir()
            _write_task(instance, task, test_command)
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return instances
