"""The embedded default: `raas run DIR` runs a project to its end in one process with no servers
(SQLite, an in-process worker, in-process events), and `raas init DIR` scaffolds a project.

Every run is a real `raas` process; the scripted model runs in the test process and is reached
through the real anthropic SDK. The session's RAAS_DATABASE_URL (Postgres) is removed from the
runs' environment, so the SQLite default applies.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from shared.models import Event, Iteration, IterationStatus, Project, ProjectStatus
from shared.project_config import ProjectConfig, parse_project_config
from tests.support.bad_input import assert_one_line_error
from tests.support.stack import RAAS, ROOT_DIR
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer

pytestmark = [pytest.mark.e2e]

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent.sock"}
NEVER_DONE = {
    "responses": [{"content": [{"type": "text", "text": "Still looking into it."}]}],
    "when_exhausted": "repeat_last",
}
SLOW_BASH = {
    "responses": [
        {
            "content": [{"type": "tool_use", "name": "bash", "input": {"command": "sleep 0.2; date"}}],
            "latency_s": 0.3,
        }
    ],
    "when_exhausted": "repeat_last",
}


@pytest.fixture(scope="module")
def hello_model() -> Iterator[ScriptedModelServer]:
    # Steps are counted per project, so every run walks the script from its start.
    with ScriptedModelServer(Script.load(ROOT_DIR / "examples/scripts/hello.json")) as server:
        yield server


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(Script.model_validate(request.param)) as server:
        yield server


def _env(data_dir: Path, model: ScriptedModelServer | None, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RAAS_DATABASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "RAAS_SANDBOX")
    }
    env.update({"RAAS_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    if model is not None:
        env["ANTHROPIC_BASE_URL"] = model.base_url
    env.update(extra)
    return env


def raas(*args: str, env: dict[str, str], timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RAAS, *args], env=env, capture_output=True, text=True, timeout=timeout_s)


def _project(data_dir: Path) -> tuple[Project, list[Iteration]]:
    """The one project in the run's SQLite database, with its iterations."""
    engine = create_engine(f"sqlite:///{data_dir / 'raas.db'}")
    try:
        with Session(engine) as session:
            project = session.scalars(select(Project)).one()
            iterations = list(session.scalars(select(Iteration).order_by(Iteration.number)))
            session.expunge_all()
    finally:
        engine.dispose()
    return project, iterations


def _show(data_dir: Path, project_id: str, path: str) -> str:
    bare = data_dir / "workspaces" / f"{project_id}.git"
    return subprocess.run(
        ["git", "-C", str(bare), "show", f"main:{path}"], capture_output=True, text=True, check=True
    ).stdout


def _hello_copy(tmp_path: Path, raas_toml: str | None = None) -> Path:
    project = tmp_path / "hello"
    shutil.copytree(ROOT_DIR / "examples/hello", project)
    if raas_toml is not None:
        (project / "raas.toml").write_text(raas_toml)
    return project


@pytest.mark.docker
def test_run_completes_hello_in_sqlite_with_docker_sandbox(
    docker_engine: str, hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    # Given a clean data directory and no servers but the scripted model
    data_dir = tmp_path / "data"

    # When examples/hello is run
    result = raas("run", str(ROOT_DIR / "examples/hello"), env=_env(data_dir, hello_model))

    # Then it completes, in Docker, with every event printed as a plain line (no TTY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local sandbox" not in result.stderr
    assert f"sandbox: docker ({docker_engine})" in result.stdout
    for event in ("project_started", "iteration_started", "agent_tool_call", "project_completed"):
        assert event in result.stdout
    assert "completed: hello" in result.stdout

    # And the SQLite database holds the completed project, and the workspace repo the program
    assert (data_dir / "raas.db").is_file()
    project, iterations = _project(data_dir)
    assert project.status == ProjectStatus.COMPLETED
    assert project.spent_usd > 0
    assert [it.completed_task for it in iterations] == [True]
    assert _show(data_dir, project.id, "hello.py") == 'print("Hello, Constellation!")\n'

    # And no container is left behind
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=raas.project={project.id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == []


def test_run_without_docker_uses_the_local_sandbox_and_says_so(
    hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    result = raas("run", str(ROOT_DIR / "examples/hello"), env=_env(data_dir, hello_model, **NO_DOCKER))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "No Docker engine: running tools in a local sandbox" in result.stderr
    assert "no network or memory isolation" in result.stderr
    assert "sandbox: local" in result.stdout
    project, _ = _project(data_dir)
    assert project.status == ProjectStatus.COMPLETED
    assert _show(data_dir, project.id, "hello.py") == 'print("Hello, Constellation!")\n'
    bash_ran = [line for line in result.stdout.splitlines() if "tool_executed" in line and "bash" in line]
    assert bash_ran
    assert "bash ok" in bash_ran[0]


@pytest.mark.parametrize("model", [NEVER_DONE], indirect=True)
def test_project_that_reaches_max_iterations_exits_1(model: ScriptedModelServer, tmp_path: Path) -> None:
    project_dir = _hello_copy(tmp_path, "max_iterations = 2\n[budget]\nlimit_usd = 1.0\n")
    data_dir = tmp_path / "data"
    result = raas("run", str(project_dir), env=_env(data_dir, model, **NO_DOCKER))

    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.splitlines()[-3]
    assert last.startswith("failed: hello: ")
    assert "max_iterations (2) reached" in last
    project, iterations = _project(data_dir)
    assert project.status == ProjectStatus.FAILED
    assert len(iterations) == 2


def test_project_out_of_budget_exits_2_and_says_budget(
    hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    # Output priced so dear that one answer spends what a floor-sized one (1,024 tokens, $153.60)
    # would need: the first call is sent lowered to what the limit pays, the second is refused.
    dear = '[pricing."claude-sonnet-4-6"]\ninput = 3\noutput = 150000\n'
    project_dir = _hello_copy(tmp_path, f"[budget]\nlimit_usd = 160\n{dear}")
    data_dir = tmp_path / "data"
    result = raas("run", str(project_dir), env=_env(data_dir, hello_model, **NO_DOCKER))

    assert result.returncode == 2, result.stdout + result.stderr
    assert "paused (budget)" in result.stdout
    project, _ = _project(data_dir)
    assert project.status == ProjectStatus.PAUSED


@pytest.mark.parametrize("model", [SLOW_BASH], indirect=True)
def test_ctrl_c_stops_the_project_cleanly_and_exits_130(model: ScriptedModelServer, tmp_path: Path) -> None:
    # Given a run whose agent never finishes
    project_dir = _hello_copy(tmp_path, "max_iterations = 50\nmax_turns = 200\n")
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [*RAAS, "run", str(project_dir)],
        env=_env(data_dir, model, **NO_DOCKER),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # (SIGINT as a terminal has it: a test run started in the background ignores it, and a
        # child would inherit that)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # When it is interrupted while a tool runs
    assert proc.stdout is not None
    for line in proc.stdout:
        if "tool_executed" in line:
            break
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # (killed and reaped here, not left for the garbage collector to warn about in another test)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"raas run did not stop within 60 s of Ctrl-C\n{out}\n{err}")

    # Then the project is stopped, nothing of it is left running, and the exit code says Ctrl-C
    assert proc.returncode == 130, out + err
    assert "stopping" in err
    assert "stopped: hello" in out
    project, iterations = _project(data_dir)
    assert project.status == ProjectStatus.STOPPED
    assert all(it.status in (IterationStatus.SUCCEEDED, IterationStatus.FAILED) for it in iterations)


@pytest.mark.parametrize("model", [SLOW_BASH], indirect=True)
def test_an_embedded_run_never_says_it_waits_for_a_worker(model: ScriptedModelServer, tmp_path: Path) -> None:
    # Given a run told to report a missing worker at once, reconciling ten times a second
    project_dir = _hello_copy(tmp_path, "max_iterations = 3\nmax_turns = 2\n")
    data_dir = tmp_path / "data"
    env = _env(data_dir, model, **NO_DOCKER, RAAS_NO_WORKERS_AFTER_S="0", RAAS_RECONCILE_INTERVAL_S="0.1")

    # When it runs to its end
    result = raas("run", str(project_dir), env=env)

    # Then its in-process worker counts as one: nothing says it waits for a worker
    assert result.returncode == 1, result.stdout + result.stderr
    assert "max_iterations (3) reached" in result.stdout
    assert "no_workers" not in result.stdout
    project, _ = _project(data_dir)
    engine = create_engine(f"sqlite:///{data_dir / 'raas.db'}")
    try:
        with Session(engine) as session:
            types = set(session.scalars(select(Event.type).where(Event.project_id == project.id)))
    finally:
        engine.dispose()
    assert "iteration_started" in types
    assert "no_workers" not in types
    assert project.waiting_for_worker_since is None


def test_init_scaffolds_a_project_that_run_accepts(hello_model: ScriptedModelServer, tmp_path: Path) -> None:
    # Given a project made by raas init
    project_dir = tmp_path / "new-project"
    data_dir = tmp_path / "data"
    result = raas("init", str(project_dir), env=_env(data_dir, None))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in project_dir.iterdir()) == ["PROMPT.md", "raas.toml"]

    # Then its raas.toml parses to the defaults (tests/unit/test_scaffold.py checks every key)
    text = (project_dir / "raas.toml").read_text()
    assert parse_project_config(text) == ProjectConfig()
    assert '# name = "new-project"' in text
    assert "<!--" in (project_dir / "PROMPT.md").read_text()

    # And raas run accepts the directory as it is
    run = raas("run", str(project_dir), env=_env(data_dir, hello_model, **NO_DOCKER))
    assert run.returncode == 0, run.stdout + run.stderr
    assert _project(data_dir)[0].name == "new-project"


def test_init_into_a_non_empty_directory_fails_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    result = raas("init", str(tmp_path), env=_env(tmp_path / "data", None))
    assert_one_line_error(result, "not empty")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_no_api_key_and_no_base_url_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = raas("run", str(ROOT_DIR / "examples/hello"), env=_env(data_dir, None))
    assert_one_line_error(result, "ANTHROPIC_API_KEY")
    assert not data_dir.exists()


def test_docker_forced_without_an_engine_is_one_line_and_writes_nothing(
    hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    env = _env(data_dir, hello_model, RAAS_SANDBOX="docker", **NO_DOCKER)
    result = raas("run", str(ROOT_DIR / "examples/hello"), env=env)
    assert_one_line_error(result, "docker sandbox", "no Docker engine")
    assert not data_dir.exists()


def test_unusable_data_directory_is_one_line_and_writes_nothing(
    hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = _env(blocker / "data", hello_model, **NO_DOCKER)
    result = raas("run", str(ROOT_DIR / "examples/hello"), env=env)
    assert_one_line_error(result, "data directory", "RAAS_DATA_DIR")
    assert blocker.read_text() == ""


def test_directory_without_prompt_is_one_line_and_writes_nothing(
    hello_model: ScriptedModelServer, tmp_path: Path
) -> None:
    (tmp_path / "project").mkdir()
    data_dir = tmp_path / "data"
    result = raas("run", str(tmp_path / "project"), env=_env(data_dir, hello_model, **NO_DOCKER))
    assert_one_line_error(result, "PROMPT.md")
    assert not data_dir.exists()
