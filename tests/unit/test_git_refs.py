"""Branch names the delivery makes are ones git accepts: the template is checked by git's rules
(held here to ``git check-ref-format`` itself), and task ids are made ref-safe before use."""

from __future__ import annotations

import subprocess

import pytest

from shared.errors import InvalidInput
from shared.git_refs import DEFAULT_BRANCH_TEMPLATE, branch_name, check_branch_template, ref_name_problem
from shared.project_config import parse_project_config

pytestmark = pytest.mark.unit

NAMES = [
    "raas/abc/main",
    "feature/x-1.2",
    "a..b",
    "a b",
    "a:b",
    "a~1",
    "a^",
    "a?",
    "a*",
    "a[b",
    "a\\b",
    ".hidden/x",
    "x/.hidden",
    "x.lock",
    "x/y.lock/z",
    "x/",
    "/x",
    "x.",
    "a//b",
    "@",
    "a@{b",
    "a@b",
    "tab\tname",
    "",
]


def _git_accepts(name: str) -> bool:
    result = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{name}"], capture_output=True, check=False
    )
    return result.returncode == 0


@pytest.mark.parametrize("name", NAMES)
def test_ref_name_rules_agree_with_git_check_ref_format(name: str) -> None:
    assert (ref_name_problem(name) is None) == _git_accepts(name)


@pytest.mark.parametrize("task", ["auth:1.2", "a..b", ".x", "y.lock", "s p a c e", "a/b", "@{u}", "project"])
def test_every_task_id_makes_a_valid_branch_of_its_own(task: str) -> None:
    name = branch_name(DEFAULT_BRANCH_TEMPLATE, "0123abcd", task)

    assert _git_accepts(name), name
    assert name != branch_name(DEFAULT_BRANCH_TEMPLATE, "0123abcd", None)


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("raas/{task}..x", "'..'"),
        ("raas {project}/{task}", "a space"),
        ("raas/{project}/{tsak}", "unknown placeholder {tsak}"),
        ("raas/{project}", "it needs {task}"),
        ("raas/{task}.lock", ".lock"),
    ],
)
def test_a_template_making_invalid_ref_names_is_refused_in_one_line(template: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_project_config(f'[delivery]\nbranch = "{template}"\n')

    message = str(caught.value)
    assert message.startswith("raas.toml: delivery.branch: ")
    assert says in message
    assert "\n" not in message
    assert check_branch_template(template) is not None


def test_a_delivery_remote_carrying_a_credential_is_refused_without_repeating_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_project_config('[delivery]\nremote = "https://bob:s3cret-token@git.example.org/a/b.git"\n')

    message = str(caught.value)
    assert message.startswith("raas.toml: delivery.remote: the URL carries a user name or password")
    assert "s3cret-token" not in message
