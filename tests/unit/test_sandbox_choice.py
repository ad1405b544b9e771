"""Which sandbox an embedded run uses, and what it tells the user about it."""

from __future__ import annotations

import pytest

from shared.errors import SandboxStartError
from workers.sandbox import choice
from workers.sandbox.choice import choose_sandbox

pytestmark = [pytest.mark.unit]
IMAGE = "constellation-sandbox:bookworm"
MISSING = f"the sandbox image {IMAGE} is missing; build it with deploy/sandbox/build-offline.sh"


def _docker(monkeypatch: pytest.MonkeyPatch, problem: str | None) -> None:
    monkeypatch.setattr(choice, "docker_problem", lambda _image: problem)


def test_docker_is_used_silently_when_it_answers_and_has_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker(monkeypatch, None)
    picked = choose_sandbox("auto", IMAGE)
    assert picked.kind == "docker"
    assert picked.notice is None


def test_without_docker_the_local_sandbox_is_used_and_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker(monkeypatch, "no Docker engine answers (connection refused)")
    picked = choose_sandbox("auto", IMAGE)
    assert picked.kind == "local"
    assert picked.notice is not None
    assert picked.notice.startswith("No Docker engine: running tools in a local sandbox")
    assert "no network or memory isolation" in picked.notice


def test_a_missing_image_says_how_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker(monkeypatch, MISSING)
    picked = choose_sandbox("auto", IMAGE)
    assert picked.kind == "local"
    assert picked.notice is not None
    assert "build-offline.sh" in picked.notice
    with pytest.raises(SandboxStartError, match="build-offline.sh"):
        choose_sandbox("docker", IMAGE)


def test_docker_forced_without_docker_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker(monkeypatch, "no Docker engine answers (connection refused)")
    with pytest.raises(SandboxStartError, match="docker sandbox was asked for"):
        choose_sandbox("docker", IMAGE)


def test_local_forced_never_asks_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(_image: str) -> str:
        msg = "docker was asked"
        raise AssertionError(msg)

    monkeypatch.setattr(choice, "docker_problem", fail)
    picked = choose_sandbox("local", IMAGE)
    assert picked.kind == "local"
    assert picked.notice is not None


def test_no_bash_means_no_local_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker(monkeypatch, "no Docker engine answers (connection refused)")
    monkeypatch.setattr(choice.shutil, "which", lambda _name: None)
    with pytest.raises(SandboxStartError, match="needs bash"):
        choose_sandbox("auto", IMAGE)
