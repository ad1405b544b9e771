"""An eval run's report and the comparison of two configurations, from the attempts' rows.

Per configuration: attempts done, resolved / failed / infrastructure failures (kept apart, but
in the denominator), resolve rate with a bootstrap 95% interval, pass@k and pass^k, dollars per
resolved task (the frozen costs: the projects' Message rows, cache reads and writes priced),
tokens, wall time, iterations, stop reasons and infra causes. Per task: which configurations
solved it, how often. Attempts that did not run (paused: the budget ran out) are listed,
outside the denominator. Formats: a dict (JSON), CSV, Markdown, and text for a terminal.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.evals import stats
from orchestrator.evals.store import get_run
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt, EvalRun

_COLUMNS = (
    EvalAttempt.task_key,
    EvalAttempt.config,
    EvalAttempt.attempt,
    EvalAttempt.state,
    EvalAttempt.outcome,
    EvalAttempt.infra_cause,
    EvalAttempt.stop_reason,
    EvalAttempt.cost_usd,
    EvalAttempt.input_tokens,
    EvalAttempt.output_tokens,
    EvalAttempt.cache_read_tokens,
    EvalAttempt.cache_write_tokens,
    EvalAttempt.iterations,
    EvalAttempt.wall_time_s,
    EvalAttempt.image,
    EvalAttempt.project_id,
)


def _rows(session: Session, run_id: str) -> list[Any]:
    return list(session.execute(select(*_COLUMNS).where(EvalAttempt.run_id == run_id)).all())


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value.quantize(Decimal('0.000001'))}"


def _config_summary(name: str, rows: list[Any], k: int) -> dict[str, Any]:
    done = [r for r in rows if r.state == AttemptState.DONE]
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in done:
        by_task[r.task_key].append(r.outcome == AttemptOutcome.RESOLVED)
    resolved = sum(1 for r in done if r.outcome == AttemptOutcome.RESOLVED)
    infra = [r for r in done if r.outcome == AttemptOutcome.INFRA]
    cost = sum((r.cost_usd for r in done), Decimal(0))
    interval = stats.bootstrap_interval(by_task)
    wall = [r.wall_time_s for r in done if r.wall_time_s is not None]
    return {
        "name": name,
        "attempts": len(done),
        "resolved": resolved,
        "failed": sum(1 for r in done if r.outcome == AttemptOutcome.FAILED),
        "infra": len(infra),
        "not_run": len(rows) - len(done),
        "resolve_rate": stats.resolve_rate(by_task),
        "ci95": list(interval) if interval else None,
        "pass_at_k": stats.mean_over_tasks(by_task, k, "at"),
        "pass_hat_k": stats.mean_over_tasks(by_task, k, "hat"),
        "cost_usd": _money(cost),
        "usd_per_resolved": _money(cost / resolved) if resolved else None,
        "tokens": {
            "input": sum(r.input_tokens for r in done),
            "output": sum(r.output_tokens for r in done),
            "cache_read": sum(r.cache_read_tokens for r in done),
            "cache_write": sum(r.cache_write_tokens for r in done),
        },
        "wall_time_s": round(sum(wall), 3),
        "mean_wall_time_s": round(sum(wall) / len(wall), 3) if wall else None,
        "iterations": sum(r.iterations for r in done),
        "mean_iterations": round(sum(r.iterations for r in done) / len(done), 3) if done else None,
        "stop_reasons": dict(Counter((r.stop_reason or "none")[:120] for r in done).most_common()),
        "infra_causes": dict(Counter((r.infra_cause or "unknown")[:200] for r in infra).most_common()),
    }


def summarize(run: EvalRun, rows: list[Any]) -> dict[str, Any]:
    """The report of ``run`` from its attempts' rows (see the module's docstring)."""
    names = [c["name"] for c in run.configs]
    per_config: dict[str, list[Any]] = {name: [] for name in names}
    for r in rows:
        per_config.setdefault(r.config, []).append(r)
    matrix: dict[str, dict[str, list[int]]] = {t["id"]: {n: [0, 0] for n in names} for t in run.tasks}
    for r in rows:
        if r.state == AttemptState.DONE:
            cell = matrix[r.task_key][r.config]
            cell[0] += r.outcome == AttemptOutcome.RESOLVED
            cell[1] += 1
    configs = [_config_summary(name, per_config[name], run.k) for name in names]
    spent = sum(
        (r.cost_usd for r in rows if r.state in (AttemptState.DONE, AttemptState.TESTING)), Decimal(0)
    )
    not_run = sorted(
        (r.task_key, r.config, r.attempt, r.state.value) for r in rows if r.state == AttemptState.PAUSED
    )
    return {
        "run": {
            "id": run.id,
            "suite": run.suite_name,
            "suite_digest": run.suite_digest,
            "k": run.k,
            "status": run.status.value,
            "status_reason": run.status_reason,
            "budget_usd": _money(run.budget_usd),
            "spent_usd": _money(spent),
            "concurrency": run.concurrency,
            "created_at": run.created_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "reproducibility": {
                **run.reproducibility,
                "test_image_ids": sorted({r.image for r in rows if r.image}),
            },
        },
        "configs": configs,
        "tasks": [
            {
                "id": t["id"],
                "difficulty": t["difficulty"],
                "solved_by": {n: f"{matrix[t['id']][n][0]}/{matrix[t['id']][n][1]}" for n in names},
            }
            for t in run.tasks
        ],
        "not_run": [{"task": t, "config": c, "attempt": a, "state": s} for t, c, a, s in not_run],
    }


def build_report(run_id: str, tenant_id: str | None) -> dict[str, Any]:
    with session_scope() as session:
        run = get_run(session, tenant_id, run_id)
        return summarize(run, _rows(session, run_id))


def attempts(run_id: str, tenant_id: str | None) -> list[dict[str, Any]]:
    """Every attempt of the run with its project (transcript, receipts and diff are the project's),
    state, outcome, infra cause, stop reason, cost and the hidden test's exit code and output tail."""
    with session_scope() as session:
        get_run(session, tenant_id, run_id)
        rows = session.scalars(
            select(EvalAttempt)
            .where(EvalAttempt.run_id == run_id)
            .order_by(EvalAttempt.attempt, EvalAttempt.task_key, EvalAttempt.config)
        ).all()
        return [
            {
                "task": a.task_key,
                "config": a.config,
                "attempt": a.attempt,
                "state": a.state.value,
                "project_id": a.project_id,
                "outcome": a.outcome.value if a.outcome else None,
                "infra_cause": a.infra_cause,
                "stop_reason": a.stop_reason,
                "cost_usd": _money(a.cost_usd),
                "iterations": a.iterations,
                "test_exit_code": a.test_exit_code,
                "test_output_tail": a.test_output_tail,
            }
            for a in rows
        ]


def _side(
    ref: str, tenant_id: str | None, session: Session
) -> tuple[EvalRun, str, dict[tuple[str, int], bool]]:
    """``RUN`` or ``RUN:CONFIG``: the run, the configuration (the run's first when not named) and
    its done attempts' outcomes by (task, attempt number)."""
    run_id, _, config = ref.partition(":")
    run = get_run(session, tenant_id, run_id)
    names = [c["name"] for c in run.configs]
    config = config or names[0]
    if config not in names:
        msg = f"eval run {run_id} has no config {config!r} (it has {', '.join(names)})"
        raise InvalidInput(msg)
    outcomes = {
        (r.task_key, r.attempt): r.outcome == AttemptOutcome.RESOLVED
        for r in _rows(session, run_id)
        if r.config == config and r.state == AttemptState.DONE
    }
    return run, config, outcomes


def compare(ref_a: str, ref_b: str, tenant_id: str | None) -> dict[str, Any]:
    """B against A, paired by task and attempt number: per-task differences, McNemar's exact
    test on the discordant pairs and a paired bootstrap of the difference in resolve rate."""
    with session_scope() as session:
        run_a, config_a, a = _side(ref_a, tenant_id, session)
        run_b, config_b, b = _side(ref_b, tenant_id, session)
        suites_differ = run_a.suite_digest != run_b.suite_digest
    paired = sorted(set(a) & set(b))
    pairs: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for key in paired:
        pairs[key[0]].append((a[key], b[key]))
    only_a = sum(1 for key in paired if a[key] and not b[key])
    only_b = sum(1 for key in paired if b[key] and not a[key])
    boot = stats.paired_bootstrap(pairs)
    return {
        "a": {"run": run_a.id, "config": config_a},
        "b": {"run": run_b.id, "config": config_b},
        "suites_differ": suites_differ,
        "pairs": len(paired),
        "a_rate": sum(a[key] for key in paired) / len(paired) if paired else None,
        "b_rate": sum(b[key] for key in paired) / len(paired) if paired else None,
        "only_a": only_a,
        "only_b": only_b,
        "mcnemar_p": stats.mcnemar_exact(only_a, only_b),
        "bootstrap": {"diff_ci95": [boot[0], boot[1]], "p": boot[2]} if boot else None,
        "tasks": [
            {
                "id": task,
                "a": sum(x for x, _ in v),
                "b": sum(y for _, y in v),
                "n": len(v),
                "diff": (sum(y for _, y in v) - sum(x for x, _ in v)) / len(v),
            }
            for task, v in sorted(pairs.items())
        ],
    }


# -- formats --------------------------------------------------------------------------------

_CSV_FIELDS = (
    "name", "attempts", "resolved", "failed", "infra", "not_run", "resolve_rate", "ci95_low", "ci95_high",
    "pass_at_k", "pass_hat_k", "cost_usd", "usd_per_resolved", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "wall_time_s", "iterations",
)  # fmt: skip


def to_csv(report: dict[str, Any]) -> str:
    """One row per configuration."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for c in report["configs"]:
        ci = c["ci95"] or [None, None]
        tokens = c["tokens"]
        writer.writerow(
            {
                **{f: c[f] for f in _CSV_FIELDS if f in c},
                "ci95_low": ci[0],
                "ci95_high": ci[1],
                "input_tokens": tokens["input"],
                "output_tokens": tokens["output"],
                "cache_read_tokens": tokens["cache_read"],
                "cache_write_tokens": tokens["cache_write"],
            }
        )
    return buffer.getvalue()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _md_cell(text: Any) -> str:
    """Text from a row (a stop reason, an infra cause: the agent's or a tool's words) made inert
    in a Markdown table: no pipes, no line breaks, no markup."""
    out = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    for char in "`*_[]<>#@":
        out = out.replace(char, "\\" + char)
    return out


def to_markdown(report: dict[str, Any]) -> str:
    run = report["run"]
    k = run["k"]
    lines = [
        f"# Eval {run['id']}: suite {_md_cell(run['suite'])} (k={k}, {run['status']})",
        "",
        f"| config | resolved | rate | 95% CI | pass@{k} | pass^{k} | infra | $ | $/resolved | iterations |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report["configs"]:
        ci = c["ci95"]
        lines.append(
            f"| {_md_cell(c['name'])} | {c['resolved']}/{c['attempts']} | {_pct(c['resolve_rate'])} | "
            f"{'-' if not ci else f'{_pct(ci[0])}–{_pct(ci[1])}'} | {_pct(c['pass_at_k'])} | "
            f"{_pct(c['pass_hat_k'])} | {c['infra']} | {c['cost_usd']} | {c['usd_per_resolved'] or '-'} | "
            f"{c['iterations']} |"
        )
    names = [c["name"] for c in report["configs"]]
    lines += ["", "| task | " + " | ".join(_md_cell(n) for n in names) + " |", "|---|" + "---|" * len(names)]
    for t in report["tasks"]:
        lines.append(f"| {_md_cell(t['id'])} | " + " | ".join(t["solved_by"][n] for n in names) + " |")
    causes = [(c["name"], cause, n) for c in report["configs"] for cause, n in c["infra_causes"].items()]
    if causes:
        lines += ["", "Infrastructure failures:", ""]
        lines += [f"- {_md_cell(name)}: {n}× {_md_cell(cause)}" for name, cause, n in causes]
    if report["not_run"]:
        lines += ["", f"Did not run ({len(report['not_run'])}): {_md_cell(run['status_reason'] or '')}", ""]
        lines += [
            f"- {_md_cell(x['task'])} × {_md_cell(x['config'])} #{x['attempt']}" for x in report["not_run"]
        ]
    return "\n".join(lines) + "\n"
