"""Eval runs as rows: made from an upload (the suite and the run's request, checked again here),
listed and read per tenant.

The upload is a .tar.gz of ``suite/`` (the suite directory) and ``eval.json``
(:class:`RunRequest`: the configurations' TOML, ``k``, budgets, concurrency). Every attempt's
row is written with the run, in one transaction: nothing of a run exists until all of it does.
"""

from __future__ import annotations

import json
import tempfile
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import defer

from orchestrator.evals.configs import EvalConfig, parse_config
from orchestrator.evals.suite import Suite, load_suite
from orchestrator.scheduling import workspace
from shared.archive import pack_directory
from shared.db import session_scope
from shared.errors import InvalidInput, NotFound
from shared.harnesses import HARNESSES
from shared.models import utcnow
from shared.models.evals import AttemptState, EvalAttempt, EvalRun
from shared.project_config import ProjectConfig, describe_validation_error
from shared.settings import Settings

REQUEST_FILE = "eval.json"
SUITE_DIR = "suite"


class ConfigIn(BaseModel):
    name: str
    toml: str


class RunRequest(BaseModel):
    """What ``raas eval run`` asks for, beside the suite."""

    configs: list[ConfigIn] = Field(min_length=1, max_length=20)
    k: int = Field(ge=1, le=100)
    concurrency: int = Field(default=4, ge=1, le=1000)
    budget_usd: Decimal | None = Field(default=None, gt=0)
    attempt_budget_usd: Decimal | None = Field(default=None, gt=0)


def check_request(request: RunRequest) -> list[EvalConfig]:
    """The request's configurations, each checked; InvalidInput naming the first bad one."""
    configs = [parse_config(c.name, c.toml) for c in request.configs]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        msg = "two configs have one name; give each --config a file of its own name"
        raise InvalidInput(msg)
    return configs


def _reproducibility(configs: list[EvalConfig], suite: Suite, settings: Settings) -> dict[str, Any]:
    parsed = [ProjectConfig.model_validate(c.data) for c in configs]
    harnesses = sorted({name for p in parsed for name in p.harnesses_in_use()})
    images = {settings.sandbox_image} | {
        t.environment.image for t in suite.tasks if t.environment is not None and t.environment.image
    }
    try:
        version = metadata.version("constellation-raas")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "raas_version": version,
        "harnesses": {
            name: HARNESSES[name].version if name in HARNESSES else "builtin" for name in harnesses
        },
        "models": sorted(
            {p.model for p in parsed} | {c.model for p in parsed for c in p.categories.values() if c.model}
        ),
        "images": sorted(images),
    }


def create_run(archive: Path, tenant_id: str | None, settings: Settings) -> EvalRun:
    """Check the uploaded suite and request; write the run and all its attempts.

    Raises:
        InvalidInput: an unreadable upload, a suite or config that does not check, k < 1.
    """
    with tempfile.TemporaryDirectory(prefix="raas-eval-upload-") as tmp:
        root = Path(tmp)
        workspace.unpack_upload(archive, root)
        try:
            request = RunRequest.model_validate(json.loads((root / REQUEST_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                raise InvalidInput(describe_validation_error("eval request", exc)) from None
            msg = f"upload: no readable {REQUEST_FILE}; use raas eval run"
            raise InvalidInput(msg) from exc
        configs = check_request(request)
        suite = load_suite(root / SUITE_DIR)
        packed = pack_directory(suite.root)
        run = EvalRun(
            tenant_id=tenant_id,
            suite_name=suite.name,
            suite_digest=suite.digest,
            suite_archive=packed,
            tasks=[t.describe(suite.root) for t in suite.tasks],
            configs=[{"name": c.name, "toml": c.toml} for c in configs],
            k=request.k,
            concurrency=request.concurrency,
            budget_usd=request.budget_usd,
            attempt_budget_usd=request.attempt_budget_usd,
            reproducibility=_reproducibility(configs, suite, settings),
            created_at=utcnow(),
        )
    with session_scope() as session:
        session.add(run)
        session.flush()
        # Attempt 1 of every task and config first, then attempt 2...: a budget that runs out
        # leaves whole rounds undone, not whole tasks.
        for number in range(1, request.k + 1):
            for task in run.tasks:
                for config in configs:
                    session.add(
                        EvalAttempt(run_id=run.id, task_key=task["id"], config=config.name, attempt=number)
                    )
        session.flush()
        session.expunge(run)
    return run


def get_run(session: Any, tenant_id: str | None, run_id: str) -> EvalRun:
    """The run, if the caller may see it (a tenant its own; the cluster token every run)."""
    run = session.get(EvalRun, run_id, options=[defer(EvalRun.suite_archive)])
    if run is None or (tenant_id is not None and run.tenant_id != tenant_id):
        msg = f"no eval run {run_id!r}; raas eval ls lists yours"
        raise NotFound(msg)
    return run


def list_runs(tenant_id: str | None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest runs first, with their attempts counted by state."""
    with session_scope() as session:
        query = (
            select(EvalRun)
            .options(defer(EvalRun.suite_archive))
            .order_by(EvalRun.created_at.desc())
            .limit(limit)
        )
        if tenant_id is not None:
            query = query.where(EvalRun.tenant_id == tenant_id)
        runs = session.scalars(query).all()
        out = []
        for run in runs:
            states = session.scalars(select(EvalAttempt.state).where(EvalAttempt.run_id == run.id)).all()
            out.append(
                {
                    "id": run.id,
                    "suite": run.suite_name,
                    "configs": [c["name"] for c in run.configs],
                    "k": run.k,
                    "status": run.status.value,
                    "attempts": len(states),
                    "done": sum(1 for s in states if s == AttemptState.DONE),
                    "created_at": run.created_at.isoformat(),
                }
            )
        return out
