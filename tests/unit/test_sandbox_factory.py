"""One function starts an iteration's sandbox from its config, whatever the kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from docker.errors import APIError

from shared.errors import SandboxStartError
from workers.sandbox import factory
from workers.sandbox.base import SandboxLimits
from workers.sandbox.factory import DockerSandboxConfig, LocalSandboxConfig, factory_for
from workers.sandbox.local import LocalSandbox

pytestmark = pytest.mark.unit


def test_a_local_config_starts_a_local_sandbox_working_in_the_iterations_own_clone(tmp_path: Path) -> None:
    sandbox = factory_for(LocalSandboxConfig())(tmp_path, SandboxLimits(), {}, "raas-it-1")
    try:
        assert isinstance(sandbox, LocalSandbox)
        assert sandbox.run("pwd").output.strip() == str(tmp_path)
    finally:
        sandbox.close()


def _failing_start(cause: Exception, calls: list[str]) -> object:
    def start(**kwargs: object) -> None:
        calls.append(str(kwargs["name"]))
        msg = "no sandbox"
        raise SandboxStartError(msg) from cause

    return start


def test_a_docker_engine_that_does_not_answer_is_waited_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(factory.DockerSandbox, "start", _failing_start(ConnectionRefusedError(), calls))
    clock = iter([0.0, 0.0, 1.0, 2.0, 9.0])
    monkeypatch.setattr(factory.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(factory.time, "sleep", lambda _s: None)
    with pytest.raises(SandboxStartError):
        factory_for(DockerSandboxConfig(image="img", engine_wait_s=5))(
            tmp_path, SandboxLimits(), {}, "raas-it-1"
        )
    assert len(calls) == 4  # tried at 0, 1 and 2 s, and once more past the 5 s it waits


def test_a_docker_engine_that_answers_no_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(factory.DockerSandbox, "start", _failing_start(APIError("no such image"), calls))
    with pytest.raises(SandboxStartError):
        factory_for(DockerSandboxConfig(image="img"))(tmp_path, SandboxLimits(), {}, "raas-it-1")
    assert calls == ["raas-it-1"]
