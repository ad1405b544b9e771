"""Where an iteration's time goes, from what it wrote: its row (enqueued, claimed, finished), its
messages (each model reply's arrival and the call's duration) and its tool events.

For an iteration of two model calls and one tool call in between:

- ``queued``: enqueued -> claimed by a worker (waiting for a free slot, or for the broker);
- ``before call 1``: claimed -> the first model call goes out (workspace fetched, container
  started, context built, budget reserved, rate limit asked);
- ``call 1``, ``call 2``: the model calls as the worker timed them (the scripted delay plus the
  stream);
- ``tool``: the tool call event -> its result event (the command in the container);
- ``after call 2``: the second reply stored -> the iteration's end recorded (commit and push of the
  workspace, finish);
- ``rest``: what is left of ``iteration`` (claimed -> finished): storing the first reply and the
  events around the tool call.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from tests.benchmarks import rig

PHASES = ("queued", "before call 1", "call 1", "tool", "call 2", "after call 2", "rest", "iteration")


def _s(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def phases_of(svc: rig.Services, project_ids: list[str]) -> dict[str, list[float]]:
    """Each phase's duration in seconds, one sample per iteration that made two calls and a tool call."""
    with svc.pg() as conn:
        iterations = conn.execute(
            "SELECT id, enqueued_at, started_at, finished_at FROM iterations "
            "WHERE project_id = ANY(%s) AND status = 'succeeded'",
            (project_ids,),
        ).fetchall()
        replies = conn.execute(
            "SELECT iteration_id, created_at, duration_s FROM messages "
            "WHERE project_id = ANY(%s) AND role = 'assistant' ORDER BY seq",
            (project_ids,),
        ).fetchall()
        tools = conn.execute(
            "SELECT iteration_id, type, ts FROM events WHERE project_id = ANY(%s) "
            "AND type IN ('agent_tool_call', 'tool_executed') ORDER BY seq",
            (project_ids,),
        ).fetchall()
    calls: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for iteration_id, created_at, duration_s in replies:
        calls[iteration_id].append((created_at, float(duration_s or 0.0)))
    tool_ts: dict[str, dict[str, datetime]] = defaultdict(dict)
    for iteration_id, kind, ts in tools:
        tool_ts[iteration_id].setdefault(kind, ts)
    phases: dict[str, list[float]] = defaultdict(list)
    for iteration_id, enqueued, claimed, finished in iterations:
        made, tool = calls.get(iteration_id, []), tool_ts.get(iteration_id, {})
        if len(made) != 2 or len(tool) != 2 or None in (enqueued, claimed, finished):
            continue
        (reply1, call1), (reply2, call2) = made
        parts = {
            "queued": _s(claimed, enqueued),
            "before call 1": _s(reply1, claimed) - call1,
            "call 1": call1,
            "tool": _s(tool["tool_executed"], tool["agent_tool_call"]),
            "call 2": call2,
            "after call 2": _s(finished, reply2),
            "iteration": _s(finished, claimed),
        }
        parts["rest"] = parts["iteration"] - sum(
            v for k, v in parts.items() if k not in ("queued", "iteration")
        )
        for name, value in parts.items():
            phases[name].append(value)
    return dict(phases)


def print_phases(label: str, by_load: dict[str, dict[str, list[float]]]) -> None:
    """One line per phase: median and 90th percentile at each load."""
    loads = list(by_load)
    print(f"{label:<8}{'phase':<16}" + "".join(f"{load:>22}" for load in loads))
    for phase in PHASES:
        cells = []
        for load in loads:
            samples = by_load[load].get(phase, [])
            cells.append(
                f"{rig.median(samples):>10.2f} / {rig.percentile(samples, 90):>7.2f}"
                if samples
                else f"{'-':>22}"
            )
        print(f"{'':<8}{phase:<16}" + "".join(f"{c:>22}" for c in cells))
    samples = next(iter(by_load.values())).get("iteration", [])
    print(f"{'':<8}({len(samples)} iterations at {loads[0]})")
