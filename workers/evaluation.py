"""The worker's side of ``raas eval`` (issue #27): hidden tests and oracles, each in a fresh container.

- :func:`check_task`: is a task fit to be scored? Its ``tests/test.sh`` must fail on the unsolved
  ``workspace/`` and pass after ``solution/solve.sh`` (run in one container, the test in another).
  In-process for ``raas eval check`` (the CLI composes both sides); on a worker, for
  ``raas eval check --remote``, as the Celery task ``raas.eval_check`` (:func:`check_row`).
- :func:`verify_attempt` (the Celery task ``raas.eval_verify``): an attempt whose project ended
  gets its task's ``tests/test.sh`` run on the project's final workspace, fetched from the
  coordinator like an iteration's; the outcome is written to the attempt's row.

The tests never enter a workspace: they are unpacked from the run's row into a directory of
their own and mounted read-only at ``/raas-tests`` of the test's container only (cwd = the
workspace, ``RAAS_TESTS_DIR`` names them). The containers are hardened as an iteration's
(no network, capabilities dropped, non-root, limits) and labelled, so the reaper finds leftovers.

A container is fresh if nothing but its own ``sleep`` ever ran in it: :class:`FreshBoxes` starts
one ahead of need per recent image, so a test pays no container create or start, and each serves
one script. Both sides run in the task's ``[environment]``, prepared as an iteration's
(:func:`prepare_environment`: its Dockerfile, its setup's snapshot, its ``keep`` links, its ``env``).
"""

from __future__ import annotations

import atexit
import io
import logging
import shutil
import tarfile
import tempfile
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from celery import Task
from celery.signals import worker_process_shutdown, worker_shutdown
from docker.errors import DockerException, ImageNotFound
from pydantic import ValidationError
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import ReadTimeout
from sqlalchemy import update

from shared.archive import unpack
from shared.celery_app import EVAL_CHECK, EVAL_VERIFY, app
from shared.db import session_scope
from shared.models import utcnow
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt, EvalCheck, EvalRun
from shared.project_config.environment import EnvironmentConfig
from shared.project_config.parse import describe_validation_error
from shared.settings import Settings, get_settings
from workers.environment import Environments, SetupFailed
from workers.sandbox.base import SandboxLimits
from workers.sandbox.container import (
    MANAGED_LABEL,
    SANDBOX_ENV,
    SANDBOX_GID,
    SANDBOX_UID,
    WORKSPACE,
    chown_workspace,
)
from workers.sandbox.docker import engine_client
from workers.sandbox.pool import POOL_LABEL
from workers.sandbox.sweeper import cluster_id
from workers.workspace_transfer import WorkspaceTransfer

log = logging.getLogger(__name__)

TESTS_DIR = "/raas-tests"
SOLUTION_DIR = "/raas-solution"
OUTPUT_TAIL_CHARS = 4000
# The engine answers a wait a little after the command's own `timeout` killed it.
WAIT_MARGIN_S = 30.0
EVAL_LABEL = "raas.eval"


@dataclass(frozen=True)
class ContainerRun:
    exit_code: int | None  # None: it did not run to an end (see ``error``)
    output: str
    image_id: str | None = None
    error: str | None = None  # why it could not run, or "timed out after Ns": an infrastructure cause

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL_CHARS:]


def _readable(root: Path) -> None:
    """Files of a read-only mount, readable by the sandbox user whoever unpacked them."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))


class FreshBox:
    """A fresh container for one script: started from the image with nothing but ``sleep``, so it
    has never run agent code, then used once and removed.

    Its workspace (read-write at ``/workspace``) and its tests and solution (read-only at
    ``/raas-tests`` and ``/raas-solution``) are bind mounts of empty host directories under
    ``root``, filled after the start: a box started ahead of need (:class:`FreshBoxes`) costs its
    user no container create or start, and the workspace is written once, straight where the
    container reads it.
    """

    def __init__(
        self, client: docker.DockerClient, image: str, scratch: Path, labels: dict[str, str] | None = None
    ) -> None:
        self.image = image
        self.root = Path(tempfile.mkdtemp(prefix="raas-eval-box-", dir=scratch))
        for name in ("workspace", "tests", "solution"):
            (self.root / name).mkdir()
        limits = SandboxLimits()
        binds = {
            str(self.workspace): {"bind": WORKSPACE, "mode": "rw"},
            str(self.tests): {"bind": TESTS_DIR, "mode": "ro"},
            str(self.solution): {"bind": SOLUTION_DIR, "mode": "ro"},
        }
        self.container = None
        try:
            self.container = client.containers.create(
                image,
                command=["sleep", "infinity"],
                user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                working_dir=WORKSPACE,
                environment=SANDBOX_ENV,
                labels={**(labels or {}), MANAGED_LABEL: "true", EVAL_LABEL: "true"},
                volumes=binds,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.memory_bytes},mode=1777"},
                mem_limit=limits.memory_bytes,
                memswap_limit=limits.memory_bytes,
                pids_limit=limits.pids,
                network_mode="none",
                init=True,
            )
            self.image_id: str | None = self.container.attrs.get("Image")
            self.container.start()
        except BaseException:
            self.discard(client)
            raise

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def solution(self) -> Path:
        return self.root / "solution"

    def run(self, script: str, timeout_s: float, env: dict[str, str] | None = None) -> ContainerRun:
        """``bash SCRIPT`` in the box, cwd = its workspace; the output's tail and the exit code.

        The output goes to a file in the box's ``/tmp`` and only its tail comes back, so a
        process the script left running with its output open does not hold the answer.
        """
        assert self.container is not None
        chown_workspace(self.workspace)
        _readable(self.tests)
        _readable(self.solution)
        log_file = "/tmp/.raas-eval-output"
        command = (
            f'timeout -s KILL {int(timeout_s)} bash "$0" > {log_file} 2>&1 < /dev/null; code=$?; '
            f"tail -c {OUTPUT_TAIL_CHARS} {log_file}; exit $code"
        )
        try:
            client = engine_client(timeout_s=int(timeout_s + WAIT_MARGIN_S))
        except DockerException as exc:
            return ContainerRun(None, "", self.image_id, f"cannot reach the Docker engine: {exc}")
        try:
            exec_id = client.api.exec_create(
                self.container.id,
                ["bash", "-c", command, script],
                user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                workdir=WORKSPACE,
                environment={**SANDBOX_ENV, **(env or {}), "RAAS_TESTS_DIR": TESTS_DIR},
            )["Id"]
            try:
                raw = client.api.exec_start(exec_id)
            except (ReadTimeout, RequestsConnectionError):
                return ContainerRun(None, "", self.image_id, f"timed out after {timeout_s:.0f}s")
            output = _tail(bytes(raw).decode("utf-8", "replace"))
            code = client.api.exec_inspect(exec_id).get("ExitCode")
        except DockerException as exc:
            return ContainerRun(None, "", self.image_id, f"the test container failed: {exc}")
        finally:
            client.close()
        if code is None:
            return ContainerRun(None, output, self.image_id, "the test container gave no exit code")
        if code == 137:  # `timeout -s KILL`
            return ContainerRun(None, output, self.image_id, f"timed out after {timeout_s:.0f}s")
        return ContainerRun(int(code), output, self.image_id)

    def discard(self, client: docker.DockerClient | None = None) -> None:
        """Remove the container and its directories."""
        if self.container is not None:
            try:
                if client is not None:
                    client.api.remove_container(self.container.id, force=True)
                else:
                    self.container.remove(force=True)
            except DockerException:
                log.warning("could not remove eval container %s", self.container.id, exc_info=True)
        shutil.rmtree(self.root, ignore_errors=True)


class FreshBoxes:
    """Boxes started ahead of need, one per image of the last few used: a hidden test on a warm
    image starts at once. A taken box is replaced in the background, and removed in the
    background after its one use (its user has its result by then). :meth:`close` removes every
    box and waits for the removals (a process exit does it)."""

    def __init__(self, scratch: Path, images: int = 2, labels: dict[str, str] | None = None) -> None:
        self.scratch = scratch
        self.labels = labels or {}
        self.images = images
        self._warm: dict[str, FreshBox] = {}  # in order of use, oldest first
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def take(self, image: str) -> FreshBox:
        """A started box of ``image`` (warm, or started now); a fresh one is started for the next.

        Raises:
            DockerException: no engine, or the box could not be started (ImageNotFound...).
        """
        with self._lock:
            box = self._warm.pop(image, None)
        if box is None or not self._alive(box):
            client = engine_client()
            try:
                box = FreshBox(client, image, self.scratch, self.labels)
            finally:
                client.close()
        self._background(self._refill, image)
        return box

    def done(self, box: FreshBox) -> None:
        """The box was used: it is removed (in the background)."""
        self._background(box.discard)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            boxes, self._warm = list(self._warm.values()), {}
        for box in boxes:
            box.discard()
        for thread in list(self._threads):
            thread.join()

    def _alive(self, box: FreshBox) -> bool:
        try:
            assert box.container is not None
            box.container.reload()
        except DockerException:
            box.discard()
            return False
        if box.container.status == "running":
            return True
        box.discard()
        return False

    def _refill(self, image: str) -> None:
        with self._lock:
            if self._closed or image in self._warm:
                return
        try:
            client = engine_client()
        except DockerException:
            return
        try:
            box = FreshBox(client, image, self.scratch, self.labels)
        except DockerException:
            log.info("could not start a warm eval container of %s", image, exc_info=True)
            return
        finally:
            client.close()
        with self._lock:
            if not self._closed and image not in self._warm:
                self._warm[image] = box
                while len(self._warm) > self.images:
                    old = self._warm.pop(next(iter(self._warm)))
                    self._background(old.discard)
                return
        box.discard()

    def _background(self, work: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=work, args=args, name="raas-eval-box", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()


_boxes: FreshBoxes | None = None
_boxes_lock = threading.Lock()


def fresh_boxes(settings: Settings, worker: str | None = None) -> FreshBoxes:
    """This process's warm boxes (closed at its exit). On a worker (``worker``: its Celery node
    name) they carry a warm pool's labels: if the worker dies, another's sweep removes them."""
    global _boxes  # noqa: PLW0603 - one pool per process, as the worker's sandbox pool
    with _boxes_lock:
        if _boxes is None:
            labels = {}
            if worker is not None:
                labels = {
                    "raas.cluster": cluster_id(settings.database_url),
                    "raas.worker": worker,
                    POOL_LABEL: "raas-eval-box",
                }
            _boxes = FreshBoxes(_scratch(settings), labels=labels)
            atexit.register(close_fresh_boxes)
        return _boxes


def close_fresh_boxes() -> None:
    """Remove this process's boxes, warm or in use (at its exit; a test, after it)."""
    global _boxes  # noqa: PLW0603
    with _boxes_lock:
        boxes, _boxes = _boxes, None
    if boxes is not None:
        boxes.close()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _close_at_shutdown(**_: object) -> None:
    """A worker's pool child or main process ends: its boxes go too (a prefork child's exit
    runs no atexit; a killed worker's boxes are the next sweep's, by their pool labels)."""
    close_fresh_boxes()


def run_in_box(
    boxes: FreshBoxes,
    image: str,
    fill: Callable[[FreshBox], None],
    script: str,
    timeout_s: float,
    env: dict[str, str] | None = None,
    collect: Callable[[FreshBox], object] | None = None,
) -> ContainerRun:
    """``fill`` the directories of a fresh box of ``image``, run ``script`` there, ``collect``
    what it left, remove it."""
    try:
        box = boxes.take(image)
    except ImageNotFound:
        return ContainerRun(None, "", error=f"image {image!r} is not on this worker's Docker engine")
    except DockerException as exc:
        return ContainerRun(None, "", error=f"the test container failed: {exc}")
    try:
        fill(box)
        result = box.run(script, timeout_s, env)
        if collect is not None:
            collect(box)
        return result
    finally:
        boxes.done(box)


@dataclass(frozen=True)
class CheckResult:
    task: str
    admitted: bool
    reason: str


def check_task(
    task_dir: Path, image: str, timeout_s: float, settings: Settings | None = None, worker: str | None = None
) -> CheckResult:
    """Admit the task only if its test fails on the unsolved tree and passes after its oracle.

    Each script runs in a fresh container of the task's environment (its ``[environment]`` in
    ``task.toml`` prepared as an iteration's: the Dockerfile built, the setup run once and
    snapshotted; ``image`` when it has none)."""
    settings = settings or get_settings()
    key = task_dir.name
    tests, solution = task_dir / "tests", task_dir / "solution"
    if not (solution / "solve.sh").is_file():
        return CheckResult(key, False, "no solution/solve.sh: an oracle must show the task can be solved")
    boxes = fresh_boxes(settings, worker)
    with tempfile.TemporaryDirectory(prefix="raas-eval-check-", dir=_scratch(settings)) as tmp:
        unsolved = Path(tmp) / "unsolved"
        shutil.copytree(task_dir / "workspace", unsolved, symlinks=True)
        try:
            env = prepare_environment(_task_environment(task_dir), unsolved, image, settings)
        except SetupFailed as exc:
            return CheckResult(key, False, f"the task's environment could not be made: {exc}")

        def fill(box: FreshBox, workspace: Path, mounted: Path, into: Path) -> None:
            shutil.copytree(workspace, box.workspace, symlinks=True, dirs_exist_ok=True)
            shutil.copytree(mounted, into, symlinks=True, dirs_exist_ok=True)

        def test(workspace: Path) -> ContainerRun:
            return run_in_box(
                boxes,
                env.image,
                lambda box: fill(box, workspace, tests, box.tests),
                f"{TESTS_DIR}/test.sh",
                timeout_s,
                env.variables,
            )

        before = test(unsolved)
        if before.error:
            return CheckResult(
                key, False, f"the test could not run on the unsolved workspace: {before.error}"
            )
        if before.passed:
            return CheckResult(key, False, "the unsolved workspace already passes tests/test.sh")
        solved = Path(tmp) / "solved"

        oracle = run_in_box(
            boxes,
            env.image,
            lambda box: fill(box, unsolved, solution, box.solution),
            f"{SOLUTION_DIR}/solve.sh",
            timeout_s,
            env.variables,
            collect=lambda box: shutil.copytree(box.workspace, solved, symlinks=True),
        )
        if oracle.error or not oracle.passed:
            why = oracle.error or f"exit {oracle.exit_code}: {_last_line(oracle.output)}"
            return CheckResult(key, False, f"solution/solve.sh failed ({why})")
        after = test(solved)
        if not after.passed:
            why = after.error or f"exit {after.exit_code}: {_last_line(after.output)}"
            return CheckResult(key, False, f"the oracle's workspace fails tests/test.sh ({why})")
    return CheckResult(key, True, "oracle passes, unsolved workspace fails")


@dataclass(frozen=True)
class TestEnvironment:
    """What a hidden test's (or an oracle's) container gets of the task's environment."""

    __test__ = False  # not a pytest class

    image: str
    variables: dict[str, str]


def _task_environment(task_dir: Path) -> dict[str, Any] | None:
    """The ``[environment]`` table of the task's ``task.toml`` (None: it has none)."""
    path = task_dir / "task.toml"
    if not path.is_file():
        return None
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("environment")
    except tomllib.TOMLDecodeError as exc:
        msg = f"task.toml does not parse: {exc}"
        raise SetupFailed(msg) from exc
    return table if isinstance(table, dict) else None


_environments: Environments | None = None


def prepare_environment(
    table: dict[str, Any] | None, workspace: Path, image: str, settings: Settings
) -> TestEnvironment:
    """The task's ``[environment]`` made ready on ``workspace`` as an iteration's is
    (workers.environment: the Dockerfile built, the setup run once and snapshotted, the ``keep``
    links put into ``workspace``); ``image`` when the task gives none.

    Raises:
        SetupFailed: the table does not check, or the image, the Dockerfile or the setup failed.
    """
    global _environments  # noqa: PLW0603 - one per process, as the iteration runner's
    if not table:
        return TestEnvironment(image, {})
    try:
        config = EnvironmentConfig.model_validate(table)
    except ValidationError as exc:
        raise SetupFailed(describe_validation_error("[environment]", exc)) from None
    if not config.active:
        return TestEnvironment(image, {})
    with _boxes_lock:
        if _environments is None:
            _environments = Environments(
                settings.scratch_dir() / "environments", image, settings.sandbox_network_allowed
            )
            atexit.register(_environments.close)
        environments = _environments
    if config.image is None and config.dockerfile is None:
        config = config.model_copy(update={"image": image})
    prepared = environments.prepare(config, workspace, {MANAGED_LABEL: "true", EVAL_LABEL: "true"})
    return TestEnvironment(prepared.mounts.image or image, dict(config.env))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def _unpack_tests(archive: bytes, task_path: str, dest: Path) -> Path:
    """The task's ``tests/`` folder out of the suite's archive, into ``dest`` (nothing else of it
    is written: a suite of thousands of tasks costs one read of its archive, not its unpacking)."""
    prefix = f"{PurePosixPath(task_path) / 'tests'}/"
    picked = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar,
        tarfile.open(fileobj=picked, mode="w") as out,
    ):
        for member in tar:
            name = member.name.removeprefix("./")
            if not name.startswith(prefix) or name == prefix:
                continue
            member.name = name[len(prefix) :]
            out.addfile(member, tar.extractfile(member) if member.isfile() else None)
    picked.seek(0)
    with tarfile.open(fileobj=picked, mode="r") as tar:
        unpack(tar, dest, links=False)
    return dest


def verify_attempt(attempt_id: str, settings: Settings, worker: str | None = None) -> AttemptOutcome | None:
    """Run the attempt's hidden test on its project's final workspace and record the outcome.

    Idempotent: an attempt that is not TESTING (done already, by this message's first delivery
    or by another worker) runs nothing. Returns the outcome written, or None.
    """
    with session_scope() as session:
        attempt = session.get(EvalAttempt, attempt_id)
        if attempt is None or attempt.state != AttemptState.TESTING or attempt.project_id is None:
            return None
        run = session.get_one(EvalRun, attempt.run_id)
        task = next(t for t in run.tasks if t["id"] == attempt.task_key)
        archive, project_id, known_cause = run.suite_archive, attempt.project_id, attempt.infra_cause
    with tempfile.TemporaryDirectory(prefix="raas-eval-test-", dir=_scratch(settings)) as tmp:
        tests = _unpack_tests(archive, task["path"], Path(tmp) / "tests")
        workspace = Path(tmp) / "workspace"
        transfer = WorkspaceTransfer(settings.coordinator_url, settings.api_token.get_secret_value())
        try:
            transfer.fetch_workspace(project_id, workspace, Path(tmp) / "git")
        except Exception as exc:  # the coordinator did not give it: try again later (the driver resends)
            log.warning(
                "eval attempt %s: could not fetch the workspace of %s: %s", attempt_id, project_id, exc
            )
            return None
        finally:
            transfer.close()
        shutil.rmtree(workspace / ".git", ignore_errors=True)
        try:
            env = prepare_environment(task.get("environment"), workspace, settings.sandbox_image, settings)
        except SetupFailed as exc:
            result = ContainerRun(None, "", error=f"environment: {exc}")
        else:
            result = run_in_box(
                fresh_boxes(settings, worker),
                env.image,
                lambda box: _fill(box, workspace, tests),
                f"{TESTS_DIR}/test.sh",
                float(task["time_limit_s"]),
                env.variables,
            )
    if result.passed:
        outcome, cause = AttemptOutcome.RESOLVED, None
    elif result.error is not None:
        outcome, cause = AttemptOutcome.INFRA, known_cause or f"test: {result.error}"
    elif known_cause:
        outcome, cause = AttemptOutcome.INFRA, known_cause
    else:
        outcome, cause = AttemptOutcome.FAILED, None
    with session_scope() as session:
        written = session.execute(
            update(EvalAttempt)
            .where(EvalAttempt.id == attempt_id, EvalAttempt.state == AttemptState.TESTING)
            .values(
                state=AttemptState.DONE,
                outcome=outcome,
                infra_cause=cause,
                test_exit_code=result.exit_code,
                test_output_tail=result.output or result.error,
                image=result.image_id,
                finished_at=utcnow(),
            )
            .returning(EvalAttempt.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
    return outcome if written else None


def _fill(box: FreshBox, workspace: Path, tests: Path) -> None:
    """The final workspace and the hidden tests into the box's directories (moved: same disk)."""
    for path in workspace.iterdir():
        path.rename(box.workspace / path.name)
    for path in tests.iterdir():
        path.rename(box.tests / path.name)


def _scratch(settings: Settings) -> Path:
    path = settings.scratch_dir() / "evals"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


@app.task(name=EVAL_VERIFY, bind=True)
def eval_verify(self: Task, attempt_id: str) -> None:
    """The Celery task: the coordinator's eval driver sends it when an attempt's project ended."""
    verify_attempt(attempt_id, get_settings(), self.request.hostname)


def check_row(row_id: str, settings: Settings, worker: str | None = None) -> bool | None:
    """Check one task of a remote check (its folder packed in the row) and write the verdict;
    a row already answered runs nothing. Returns whether it was admitted, or None."""
    with session_scope() as session:
        row = session.get(EvalCheck, row_id)
        if row is None or row.admitted is not None:
            return None
        key, archive, image, timeout_s = row.task_key, row.task_archive, row.image, row.timeout_s
    with tempfile.TemporaryDirectory(prefix="raas-eval-check-", dir=_scratch(settings)) as tmp:
        task_dir = Path(tmp) / key
        task_dir.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            unpack(tar, task_dir, links=False)
        result = check_task(task_dir, image or settings.sandbox_image, timeout_s, settings, worker)
    with session_scope() as session:
        written = session.execute(
            update(EvalCheck)
            .where(EvalCheck.id == row_id, EvalCheck.admitted.is_(None))
            .values(admitted=result.admitted, reason=result.reason, finished_at=utcnow())
            .returning(EvalCheck.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
    return result.admitted if written else None


@app.task(name=EVAL_CHECK, bind=True)
def eval_check(self: Task, row_id: str) -> None:
    """The Celery task of ``raas eval check --remote``: one task's oracle and unsolved workspace."""
    check_row(row_id, get_settings(), self.request.hostname)
