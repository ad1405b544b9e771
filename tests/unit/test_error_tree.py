"""shared/errors.py's promise, checked against the source: every exception class Constellation
defines is in that module and drawn in its tree, or is a control-flow signal its docstring names."""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from pathlib import Path

import pytest

from shared import errors

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "orchestrator", "workers")
TREE, _, SIGNALS = (errors.__doc__ or "").partition("Control-flow signals")


def _is_exception_name(name: str) -> bool:
    known = getattr(builtins, name, None) or getattr(errors, name, None)
    return isinstance(known, type) and issubclass(known, BaseException)


def _exception_classes() -> list[tuple[str, str]]:
    """(module path, class name) of each class whose bases include a builtin or shared exception."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if any(_is_exception_name(base) for base in bases):
                    found.append((path.relative_to(ROOT).as_posix(), node.name))
    return found


def test_every_error_class_outside_errors_py_is_a_named_control_flow_signal() -> None:
    strays = [
        f"{module}: {name}"
        for module, name in _exception_classes()
        if module != "shared/errors.py" and not re.search(rf"\b{re.escape(name)}\b", SIGNALS)
    ]
    assert not strays, (
        "define these in shared/errors.py, or name them among its control-flow signals: " + ", ".join(strays)
    )


def test_the_tree_in_the_docstring_draws_every_error_class() -> None:
    classes = [
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    ]
    assert classes
    assert [name for name in classes if not re.search(rf"\b{name}\b", TREE)] == []


def test_every_error_raised_on_purpose_descends_from_raas_error() -> None:
    for name, value in vars(errors).items():
        if inspect.isclass(value) and value.__module__ == errors.__name__:
            assert issubclass(value, errors.RaasError), name
