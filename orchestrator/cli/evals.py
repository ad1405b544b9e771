"""``raas eval``: suites × configurations × attempts, scored by hidden tests (issue #27).

``check`` runs here, in this machine's Docker (the CLI composes both sides, as ``raas run`` does):
every task's oracle and unsolved workspace, each in fresh containers; with ``--remote`` the same
runs on the coordinator's workers (``raas.eval_check``, one per task). ``run`` checks the whole
suite and every config here first (one line naming what is wrong, nothing sent), then the
coordinator checks them again and its eval driver starts the attempts. ``report`` and ``compare``
read what the coordinator recorded.
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli import PROJECTS, JsonFlag, api, app, print_json
from orchestrator.cli.exit_codes import ExitCode
from orchestrator.evals import report as reports
from orchestrator.evals import swebench
from orchestrator.evals.configs import read_configs
from orchestrator.evals.store import REQUEST_FILE, SUITE_DIR, ConfigIn, RunRequest
from orchestrator.evals.suite import load_suite
from shared.archive import EXCLUDED_DIRS
from shared.errors import InvalidInput
from shared.settings import get_settings

eval_app = typer.Typer(help="Evaluations: suites × configs × attempts, scored by hidden tests.")
app.add_typer(eval_app, name="eval", rich_help_panel=PROJECTS)

WAIT_POLL_S = 2.0


@eval_app.command("check")
def check(
    suite: Path,
    as_json: JsonFlag = False,
    timeout_s: Annotated[float, typer.Option(help="Each container's time limit.")] = 300.0,
    remote: Annotated[bool, typer.Option("--remote", help="On the coordinator's workers, not here.")] = False,
) -> None:
    """Admit only tasks whose oracle passes and whose unsolved workspace fails (Docker, here)."""
    loaded = load_suite(suite)
    if remote:
        results = _check_remote(loaded.root)
    else:
        from workers.evaluation import check_task

        image = get_settings().sandbox_image
        results = []
        for task in loaded.tasks:
            task_image = (task.environment.image if task.environment else None) or image
            done = check_task(task.path, task_image, min(timeout_s, task.meta.time_limit_s))
            results.append({"task": done.task, "admitted": done.admitted, "reason": done.reason})
    if as_json:
        print_json(results)
    else:
        for r in results:
            typer.echo(f"{'admitted' if r['admitted'] else 'refused '}  {r['task']}  {r['reason']}")
        typer.echo(f"{sum(bool(r['admitted']) for r in results)} of {len(results)} task(s) admitted")
    if not all(r["admitted"] for r in results):
        raise typer.Exit(ExitCode.ERROR)


def _check_remote(root: Path) -> list[dict[str, Any]]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add_suite(tar, root)
    created = api().request(
        "POST", "/v1/evals/checks", content=buffer.getvalue(), headers={"Content-Type": "application/gzip"}
    )
    while True:
        results: list[dict[str, Any]] = api().request("GET", f"/v1/evals/checks/{created['id']}")
        if all(r["admitted"] is not None for r in results):
            return results
        time.sleep(WAIT_POLL_S)


def _add_suite(tar: tarfile.TarFile, suite: Path) -> None:
    for path in sorted(suite.rglob("*")):
        rel = path.relative_to(suite)
        if EXCLUDED_DIRS.intersection(rel.parts):
            continue
        tar.add(path, arcname=f"{SUITE_DIR}/{rel.as_posix()}", recursive=False)


def _pack(suite: Path, request: RunRequest) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add_suite(tar, suite)
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(REQUEST_FILE)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@eval_app.command("run")
def run(
    suite: Path,
    config: Annotated[list[Path], typer.Option("--config", help="A raas.toml fragment; repeat for each.")],
    k: Annotated[int, typer.Option("-k", help="Attempts per task and config.")] = 1,
    budget: Annotated[float | None, typer.Option(help="The eval-wide limit in USD.")] = None,
    attempt_budget: Annotated[
        float | None, typer.Option(help="Each attempt's cap in USD (over the task's).")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Attempts running at once.")] = 4,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end; print its report.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Start an eval run: every task × config × attempt is a project of yours."""
    if k < 1:
        msg = f"-k {k}: give at least 1 attempt per task and config"
        raise InvalidInput(msg)
    if concurrency < 1:
        msg = f"--concurrency {concurrency}: give at least 1"
        raise InvalidInput(msg)
    for flag, value in (("--budget", budget), ("--attempt-budget", attempt_budget)):
        if value is not None and value <= 0:
            msg = f"{flag} {value}: give a positive amount in USD"
            raise InvalidInput(msg)
    loaded = load_suite(suite)
    configs = read_configs(config)
    request = RunRequest(
        configs=[ConfigIn(name=c.name, toml=c.toml) for c in configs],
        k=k,
        concurrency=concurrency,
        budget_usd=None if budget is None else Decimal(str(budget)),
        attempt_budget_usd=None if attempt_budget is None else Decimal(str(attempt_budget)),
    )
    created = api().request(
        "POST", "/v1/evals", content=_pack(loaded.root, request), headers={"Content-Type": "application/gzip"}
    )
    if not wait:
        if as_json:
            print_json(created)
        else:
            attempts = len(loaded.tasks) * len(configs) * k
            typer.echo(f"eval run {created['id']}: {attempts} attempt(s) of suite {loaded.name}")
        return
    data = _wait(created["id"])
    if as_json:
        print_json(data)
    else:
        sys.stdout.write(reports.to_markdown(data))


def _wait(run_id: str) -> dict[str, Any]:
    while True:
        data: dict[str, Any] = api().request("GET", f"/v1/evals/{run_id}")
        if data["run"]["status"] != "running":
            return data
        time.sleep(WAIT_POLL_S)


@eval_app.command("report")
def report(
    run_id: str,
    as_json: JsonFlag = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="One CSV row per config.")] = False,
    as_md: Annotated[bool, typer.Option("--md", help="Markdown tables.")] = False,
) -> None:
    """A run's report: per config resolve rate (95% CI), pass@k, pass^k, $ per resolved task."""
    if sum((as_json, as_csv, as_md)) > 1:
        msg = "give one of --json, --csv, --md"
        raise InvalidInput(msg)
    data = api().request("GET", f"/v1/evals/{run_id}")
    if as_json:
        print_json(data)
    elif as_csv:
        sys.stdout.write(reports.to_csv(data))
    else:
        sys.stdout.write(reports.to_markdown(data))


@eval_app.command("attempts")
def attempts(run_id: str, as_json: JsonFlag = False) -> None:
    """A run's attempts: each one's project, outcome, cause, cost and the hidden test's exit code."""
    rows = api().request("GET", f"/v1/evals/{run_id}/attempts")
    if as_json:
        print_json(rows)
        return
    for a in rows:
        outcome = a["outcome"] or a["state"]
        cause = f"  ({a['infra_cause']})" if a["infra_cause"] else ""
        project = a["project_id"] or "-"
        typer.echo(
            f"{a['task']}  {a['config']}  #{a['attempt']}  {outcome}  ${a['cost_usd']}  {project}{cause}"
        )


@eval_app.command("compare")
def compare(
    a: Annotated[str, typer.Argument(help="RUN or RUN:CONFIG (the run's first config if not named).")],
    b: Annotated[str, typer.Argument(help="RUN or RUN:CONFIG.")],
    as_json: JsonFlag = False,
) -> None:
    """B against A, task by task: paired differences, McNemar's exact test, paired bootstrap."""
    data = api().request("GET", "/v1/evals/compare", params={"a": a, "b": b})
    if as_json:
        print_json(data)
        return
    boot = data["bootstrap"]
    lines = [
        f"A {data['a']['run']}:{data['a']['config']}  vs  B {data['b']['run']}:{data['b']['config']}"
        + ("  (different suites!)" if data["suites_differ"] else ""),
        f"pairs {data['pairs']}: A resolved {_pct(data['a_rate'])}, B {_pct(data['b_rate'])}; "
        f"only A {data['only_a']}, only B {data['only_b']}; McNemar exact p = {data['mcnemar_p']:.4f}",
    ]
    if boot:
        lo, hi = boot["diff_ci95"]
        lines.append(
            f"paired bootstrap: B - A = [{100 * lo:+.1f}, {100 * hi:+.1f}] points (95%), p = {boot['p']:.4f}"
        )
    lines += [f"  {t['id']}: A {t['a']}/{t['n']}  B {t['b']}/{t['n']}" for t in data["tasks"] if t["diff"]]
    typer.echo("\n".join(lines))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


@eval_app.command("ls")
def list_runs(as_json: JsonFlag = False) -> None:
    """Your eval runs, newest first."""
    runs = api().request("GET", "/v1/evals")
    if as_json:
        print_json(runs)
        return
    for r in runs:
        configs = ",".join(r["configs"])
        line = f"{r['id']}  {r['suite']}  {configs}  k={r['k']}  {r['status']}  {r['done']}/{r['attempts']}"
        typer.echo(line)


@eval_app.command("import-swebench")
def import_swebench(
    instances: Annotated[Path, typer.Argument(help="SWE-bench-style instances, one JSON object a line.")],
    repos: Annotated[Path, typer.Option(help="Local clones: DIR/<owner>__<name> or DIR/<owner>/<name>.")],
    out: Annotated[Path, typer.Option(help="The suite folder to write (must not exist).")],
    test_command: Annotated[
        str, typer.Option(help="The command the test ids are appended to, e.g. 'python3 -m unittest'.")
    ] = swebench.DEFAULT_TEST_COMMAND,
) -> None:
    """Import SWE-bench-style instances (local JSONL + local clones) as a suite, offline."""
    done = swebench.import_swebench(instances, repos, out, test_command)
    typer.echo(f"imported {len(done)} task(s) into {out}; check them with: raas eval check {out}")
