"""Branch names the delivery pushes to: the ``[delivery] branch`` template, rendered and checked.

The check is git's own rules for a ref name (``git check-ref-format``, see git-check-ref-format(1)),
written out so that validating raas.toml needs no subprocess; a unit test holds it to git's answer.
Task ids may hold ``:`` (SCUD ids like ``auth:1.2``), which no ref may: values are made ref-safe
before they are put in, and the template's own text must give a valid name by itself.
"""

from __future__ import annotations

import re

DEFAULT_BRANCH_TEMPLATE = "raas/{project}/{task}"
# The {task} of the project's own branch (the one its pull request comes from).
PROJECT_BRANCH_TASK = "project"
PLACEHOLDERS = ("project", "task")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# Stand-ins used to check a template: a project id and a task id of the longest usual shape.
_SAMPLE = {"project": "0123456789abcdef", "task": "task-1.2"}


def ref_name_problem(name: str) -> str | None:
    """Why ``refs/heads/<name>`` is not a valid ref name, or None when it is."""
    if not name:
        return "it is empty"
    if _FORBIDDEN_CHARS.search(name):
        return "it holds a space, a control character or one of ~ ^ : ? * [ \\"
    if "@{" in name:
        return "it holds '@{'"
    if ".." in name or "//" in name:
        return "it holds '..' or '//'"
    if name.startswith("/") or name.endswith(("/", ".")):
        return "it begins with '/' or ends with '/' or '.'"
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return f"its part {part!r} begins with '.' or ends with '.lock'"
    return None


def ref_safe(value: str) -> str:
    """``value`` with what a ref name may not hold replaced by ``-`` (``auth:1.2`` → ``auth-1.2``)."""
    cleaned = _FORBIDDEN_CHARS.sub("-", value).replace("/", "-").replace("@{", "-{")
    while ".." in cleaned:
        cleaned = cleaned.replace("..", ".")
    cleaned = cleaned.lstrip(".").removesuffix(".lock").rstrip(".")
    return cleaned or "-"


def check_branch_template(template: str) -> str | None:
    """Why the template cannot make branch names, or None when it can."""
    unknown = [name for name in _PLACEHOLDER.findall(template) if name not in PLACEHOLDERS]
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}}; use {{project}} and {{task}}"
    if "{task}" not in template:
        return "it needs {task}: each task gets a branch of its own"
    if "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
        return "it has an unmatched '{' or '}'"
    problem = ref_name_problem(template.format(**_SAMPLE))
    return None if problem is None else f"it does not make a valid git branch name: {problem}"


def branch_name(template: str, project_id: str, task_key: str | None) -> str:
    """The branch of a task (``task_key``) or of the whole project (None)."""
    task = PROJECT_BRANCH_TASK if task_key is None else ref_safe(task_key)
    if task_key is not None and task == PROJECT_BRANCH_TASK:
        task = f"task-{task}"  # a task named "project" must not share the project's branch
    return template.format(project=ref_safe(project_id), task=task)
