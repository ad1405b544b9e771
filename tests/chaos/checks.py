"""What must hold after a soak, project by project, gathered into one table.

Each check runs on every project (the follower check on the followed ones) and keeps going after
a failure, so the table shows every problem at once. A check holds for a project when:

- **ended or resumed**: it ended (completed, or delivered for a ``pr`` project), or paused at its
  budget (a ``budget`` project), or, paused for another reason, ``raas resume`` took it to its end;
- **effects once**: in its final workspace (``raas pull``) ``effects.log`` has no line twice, no
  iteration number has two commits (on the delivered branch, or in the local store's
  repository) unless one of its attempts was re-run (see ``check_effects``), and every note a
  succeeded attempt wrote is there as written;
- **LLM calls charged once**: replies are stored once per (iteration, attempt, seq), none that the
  model did not send, none missing but those a fault cut off in flight (at most one per re-run
  attempt or unfinished iteration); spent == the messages' costs == the agents' == the
  iterations' == the ledger's settlements, with one (non-zero) settlement per stored reply;
- **budget held**: spent <= limit; a ``budget`` project stopped at its limit;
- **events**: the database's seq is 1..N with no gap; a follower (``raas follow --json``) saw each
  event once, equal to the database's, up to the project's end (``project_completed``: it stops
  there, before a delivery's events) or, for a paused project, up to the last;
- **delivered once**: a ``pr`` project's branch on the git server is its final workspace and the
  forge has exactly one pull request from it; a ``branch`` project's too, with no pull request; a
  project with no delivery pushed nothing;
- **nothing left**: no container labelled with the project, no iteration still running (nor
  queued, unless it waits for a paused project's resumption), nothing reserved on the project or
  its iterations; and (one more row, the cluster's) every lease in force is held by a live replica;
  and (one more, the store's) once swept as the lease holder sweeps it, every object the workspace
  store keeps is named by a row, but those of a workspace whose first write never committed (kept
  until they are an hour old).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from orchestrator.workspaces.s3 import S3Store
from shared.db import session_scope
from shared.events import (
    DELIVERY_FAILED,
    DELIVERY_PUSHED,
    PULL_REQUEST_OPENED,
    PULL_REQUEST_UPDATED,
    TERMINAL_EVENTS,
)
from shared.models import (
    Iteration,
    IterationStatus,
    LedgerEntry,
    LedgerKind,
    PauseReason,
    Project,
    ProjectStatus,
)
from shared.models.cluster import Lease
from shared.models.workspaces import WorkspaceHead
from tests.support.faults import (
    Follower,
    Rig,
    _check_costs,
    _check_messages,
    _db_events,
    containers_of,
    wait_until,
    written_notes,
)
from tests.support.forge import FakeForge
from tests.support.git_server import GitServer, git
from tests.support.object_store import named_keys
from tests.support.replicas import holder_process

from .workload import REPO, ProjectPlan

CHECKS = (
    "ended or resumed",
    "effects once",
    "LLM calls charged once",
    "budget held",
    "events",
    "delivered once",
    "nothing left",
)
CONTAINERS_GONE_S = 60.0


@dataclass
class Subject:
    """One submitted project and what the soak knows of it."""

    plan: ProjectPlan
    project_id: str
    follower: Follower | None = None
    resumed: bool = False


@dataclass
class Table:
    """Per check: the projects it ran on, and its problems (one line each)."""

    ran: Counter[str] = field(default_factory=Counter)
    problems: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def record(self, check: str, project_id: str, run: Callable[[], Any]) -> Any:
        self.ran[check] += 1
        try:
            return run()
        except Exception as exc:  # a check that breaks is a problem of its row, not the soak's end
            words = str(exc).strip().splitlines()[:1]
            # A failed assertion says what failed; anything else is named by its type too.
            if not isinstance(exc, AssertionError) or not words:
                words.insert(0, type(exc).__name__)
            self.problems.setdefault(check, []).append(f"{project_id}: {' '.join(words)}")
            return None

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())

    def render(self) -> str:
        rows = [("check", "result", "projects", "notes")]
        for check in CHECKS:
            failed = len(self.problems.get(check, []))
            ran = self.ran[check]
            rows.append(
                (check, "FAIL" if failed else "ok", f"{ran - failed}/{ran}", self.notes.get(check, ""))
            )
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [
            " | ".join([*(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)), row[3]]) for row in rows
        ]
        lines.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 5)
        for check in CHECKS:
            for problem in self.problems.get(check, []):
                lines.append(f"  {check}: {problem}")
        return "\n".join(lines)


def project_row(database_url: str, project_id: str) -> Project:
    with session_scope(database_url) as session:
        project = session.get_one(Project, project_id)
        session.expunge(project)
    return project


def check_ended(rig: Rig, subject: Subject) -> None:
    project = project_row(rig.database_url, subject.project_id)
    resumed = " after raas resume" if subject.resumed else ""
    if subject.plan.kind == "budget":
        ended = project.status in (ProjectStatus.COMPLETED,) or (
            project.status == ProjectStatus.PAUSED and project.pause_reason == PauseReason.BUDGET_EXCEEDED
        )
    else:
        expected = ProjectStatus.DELIVERED if subject.plan.kind == "pr" else ProjectStatus.COMPLETED
        ended = project.status == expected
    assert ended, f"{project.status.value}{resumed} ({project.pause_reason}): {project.status_reason}"


def pull(rig: Rig, project_id: str) -> Path:
    """The project's final workspace, as ``raas pull`` gives it (a clone of its main branch)."""
    target = rig.work_dir / "pulled" / project_id
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        done = rig.stack.cli("pull", project_id, str(target))
        assert done.returncode == 0, f"raas pull failed: {done.stderr.strip()}"
    return target


def history(rig: Rig, subject: Subject, server: GitServer) -> list[str] | None:
    """The subjects of the commits of the project's final workspace, newest first: its delivered
    branch's, or its bare repository's in a local workspace store; None when neither is there."""
    if subject.plan.from_repo:
        return [line for _, line in server.log(REPO, f"raas/{subject.project_id}/project")]
    bare = Path(rig.stack.env["RAAS_DATA_DIR"]) / "workspaces" / f"{subject.project_id}.git"
    if not bare.exists():
        return None
    return git("log", "--format=%s", "main", cwd=bare).splitlines()


def check_effects(rig: Rig, subject: Subject, server: GitServer) -> int:
    """Returns the number of effect lines found."""
    tree = pull(rig, subject.project_id)
    effects_file = tree / "effects.log"
    lines = effects_file.read_text().splitlines() if effects_file.exists() else []
    twice = [line for line, n in Counter(lines).items() if n > 1]
    assert not twice, f"effects applied twice: {twice}"
    subjects = history(rig, subject, server)
    if subjects is not None:
        numbers = Counter(s.split(":")[0] for s in subjects if s.startswith("Iteration "))
        # A re-run attempt may add a second commit to an iteration: an attempt whose push was
        # accepted and that then failed (its worker lost the broker before reporting) is run
        # again on top of its own commit, by design of workers/iteration.py (a failed attempt's
        # pushed work is kept). Its effects are still once (the lines above). Any other
        # iteration committed twice is a duplicate.
        rerun = (Iteration.project_id == subject.project_id, Iteration.attempt > 1)
        mine = select(Iteration.number).where(*rerun)
        with session_scope(rig.database_url) as session:
            retried = {f"Iteration {number}" for number in session.scalars(mine)}
        twice_committed = [(name, n) for name, n in numbers.items() if n > 1 and name not in retried]
        assert not twice_committed, f"iterations committed twice: {twice_committed}"
    for path, content in written_notes(rig.database_url, subject.project_id).items():
        found = (tree / path).read_text() if (tree / path).exists() else None
        assert found == content, f"{path} is not in the workspace as written (found {found!r})"
    return len(lines)


def check_charges(rig: Rig, subject: Subject) -> tuple[int, Decimal]:
    """Returns (replies stored, dollars spent)."""
    with session_scope(rig.database_url) as session:
        iterations = list(
            session.scalars(select(Iteration).where(Iteration.project_id == subject.project_id))
        )
        settlements = session.scalar(
            select(func.count()).where(
                LedgerEntry.project_id == subject.project_id,
                LedgerEntry.kind == LedgerKind.SETTLE,
                LedgerEntry.amount_usd > 0,  # an iteration's end settles its admission at 0
            )
        )
    # A reply the fault cut off in flight was never received: at most one per re-run attempt and
    # one per iteration that did not succeed.
    cut = sum(it.attempt - 1 for it in iterations) + sum(
        1 for it in iterations if it.status != IterationStatus.SUCCEEDED
    )
    _, replies = _check_messages(rig, subject.project_id, cut)
    spent = _check_costs(rig, subject.project_id)
    assert settlements == replies, f"{settlements} settlements in the ledger for {replies} stored replies"
    return replies, spent


def check_budget(rig: Rig, subject: Subject) -> None:
    project = project_row(rig.database_url, subject.project_id)
    assert project.spent_usd <= project.budget_limit_usd, (
        f"spent ${project.spent_usd} past its limit ${project.budget_limit_usd}"
    )
    if subject.plan.kind == "budget" and project.status != ProjectStatus.COMPLETED:
        assert project.pause_reason == PauseReason.BUDGET_EXCEEDED, f"paused for {project.pause_reason}"


def check_events(rig: Rig, subject: Subject) -> int:
    """Returns the number of events the follower saw (0 when the project had none)."""
    stored = _db_events(rig.database_url, subject.project_id)
    seqs = [e["seq"] for e in stored]
    assert seqs == list(range(1, len(stored) + 1)), f"the database's seq has a gap: {_gaps(seqs)}"
    if subject.follower is None:
        return 0
    follower = subject.follower

    def caught_up() -> bool:
        return len(follower.events()) >= len(stored)

    with contextlib.suppress(TimeoutError):  # what it lacks then is reported below
        wait_until(caught_up, 30, "the follower to catch up", 0.5)
    seen = follower.events()
    seen_seqs = [e["seq"] for e in seen]
    assert seen_seqs == list(range(1, len(seen) + 1)), f"the follower's seq is not 1..N: {_gaps(seen_seqs)}"
    # `raas follow` ends after the project's end and the deliveries that end decided; what may come
    # later (a failed delivery retried, a followed pull request's end) it does not wait for.
    ended = bool(seen) and seen[-1]["type"] in _FOLLOW_ENDS
    assert ended or len(seen) == len(stored), (
        f"the follower saw {len(seen)} events and no end, the database has {len(stored)}"
    )
    for mine, theirs in zip(seen, stored, strict=False):
        assert mine == theirs, f"the follower's event {mine['seq']} differs from the database's"
    return len(seen)


_FOLLOW_ENDS = TERMINAL_EVENTS | {DELIVERY_PUSHED, DELIVERY_FAILED, PULL_REQUEST_OPENED, PULL_REQUEST_UPDATED}


def _gaps(seqs: list[int]) -> str:
    twice = [s for s, n in Counter(seqs).items() if n > 1]
    missing = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
    return f"twice {twice[:5]}, missing {missing[:5]}"


def check_delivery(rig: Rig, subject: Subject, server: GitServer, forge: FakeForge) -> None:
    branch = f"raas/{subject.project_id}/project"
    pulls = [p for p in forge.pulls(REPO) if p["head"]["ref"] == branch]
    if not subject.plan.from_repo:
        assert branch not in server.branches(REPO), "a project with no delivery pushed a branch"
        return
    head = project_row(rig.database_url, subject.project_id).workspace_sha
    pushed = server.branches(REPO).get(branch)
    assert pushed == head, f"branch {branch} is {pushed}, the final workspace {head}"
    expected = 1 if subject.plan.kind == "pr" else 0
    assert len(pulls) == expected, f"{len(pulls)} pull requests from {branch}, expected {expected}"


def check_nothing_left(rig: Rig, subject: Subject) -> None:
    deadline = time.monotonic() + CONTAINERS_GONE_S
    while (left := containers_of(subject.project_id)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"{len(left)} containers left"
    with session_scope(rig.database_url) as session:
        project = session.get_one(Project, subject.project_id)
        # A paused project's next iteration waits queued (unclaimed) for its resumption.
        unfinished = (
            [IterationStatus.RUNNING]
            if project.status == ProjectStatus.PAUSED
            else [IterationStatus.QUEUED, IterationStatus.RUNNING]
        )
        claimed = session.scalar(
            select(func.count()).where(
                Iteration.project_id == subject.project_id, Iteration.status.in_(unfinished)
            )
        )
        held = session.scalar(
            select(func.coalesce(func.sum(Iteration.reserved_usd), 0)).where(
                Iteration.project_id == subject.project_id
            )
        )
        reserved_now = project.reserved_usd
    assert claimed == 0, f"{claimed} iterations still {' or '.join(u.value for u in unfinished)}"
    assert reserved_now == 0 == held, f"still reserved: project ${reserved_now}, iterations ${held}"


def check_store(rig: Rig, store: S3Store) -> tuple[int, int]:
    """Sweep the store (the uploads of writes a fault cut off before their commit go), then every
    object it keeps is named by a row, or is of a workspace with no head; returns how many were
    swept and how many are kept."""
    swept = store.sweep()
    prefix = store.bucket.location.key("")
    kept = [key for key, _ in store.bucket.listing(prefix)]
    with session_scope(rig.database_url) as session:
        heads = set(session.scalars(select(WorkspaceHead.project_id)))
    named = set(named_keys(rig.database_url))
    unnamed = [key for key in kept if key not in named and key[len(prefix) :].split("/")[0] in heads]
    assert not unnamed, f"{len(unnamed)} object(s) no row names after the sweep, e.g. {unnamed[0]}"
    missing = sorted(named - set(kept))
    assert not missing, f"{len(missing)} object(s) a row names are not in the store, e.g. {missing[0]}"
    return len(swept), len(kept)


def check_leases(rig: Rig) -> int:
    """Every lease still in force (the reconcile loop's) is held by a live process of the stack;
    returns how many are."""
    with session_scope(rig.database_url) as session:
        rows = list(session.scalars(select(Lease)))
    live = [row for row in rows if row.expires_at.timestamp() > time.time()]
    for row in live:
        try:
            holder_process(rig.stack, row.holder)
        except LookupError as exc:
            msg = f"lease {row.name}: {exc}"
            raise AssertionError(msg) from None
    return len(live)
