"""The soak's projects: one scripted model script, several kinds of project.

Every project walks the same script from its first step (the scripted model keeps a cursor per
project): iteration *k* writes ``notes/k.md``, then runs ``bash`` in its sandbox, which sleeps
(the window a fault lands in) and appends the line ``step k`` to ``effects.log``; then it ends its
turn; the last iteration calls ``task_complete``, which also answers every request past the end,
so a re-run attempt (which takes the script's next steps) still leads to the end.
``effects.log`` is the iteration's side effect: a line twice in the final workspace is an effect
applied twice.

The kinds (drawn from the seed):

- ``pr``: started from the loopback git server's repository, delivered as a branch and a ready
  pull request on the fake forge (which the project then follows: it ends ``delivered``);
- ``branch``: from the repository, delivered as a branch only (``pull_request = "off"``);
- ``local``: uploaded from a directory, not delivered;
- ``budget``: uploaded, with a budget that pays for only a few calls: it must stop at its
  limit (paused, ``budget_exceeded``) without spending past it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.support.faults import USAGE

ITERATIONS = 6
REPO = "alice/app"
KINDS = ("pr", "branch", "local", "budget")
KIND_WEIGHTS = (3, 2, 3, 1)
LIMIT_USD = Decimal(5)
# A reply costs $0.00375 here; one call's worst case (4,000 tokens in, 1,024 out) $0.03036, the
# least limit a project may have: a few iterations, then the gate.
TIGHT_LIMIT_USD = Decimal("0.05")


def script(sleep_s: float = 2.0, latency_s: float = 0.3) -> dict[str, Any]:
    """The one script every project walks (see the module docstring)."""
    responses: list[dict[str, Any]] = []
    for number in range(1, ITERATIONS + 1):
        note = f"notes/{number}.md"
        command = f"sleep {sleep_s}; echo 'step {number}' >> effects.log; cat {note}"
        responses.append(
            {
                "content": [
                    {"type": "text", "text": f"Iteration {number}: note {number} and its effect."},
                    {
                        "type": "tool_use",
                        "name": "write",
                        "input": {"path": note, "content": f"note {number}\n"},
                    },
                    {"type": "tool_use", "name": "bash", "input": {"command": command}},
                ],
                "usage": USAGE,
                "latency_s": latency_s,
            }
        )
        if number == ITERATIONS:
            end = [{"type": "tool_use", "name": "task_complete", "input": {"summary": "all notes written"}}]
        else:
            end = [{"type": "text", "text": f"Note {number} is written; the next iteration goes on."}]
        responses.append({"content": end, "usage": USAGE, "latency_s": latency_s})
    return {"responses": responses, "when_exhausted": "repeat_last"}


@dataclass(frozen=True)
class ProjectPlan:
    """One project the soak submits: its kind and when (seconds after the start)."""

    index: int
    kind: str
    at_s: float

    @property
    def limit_usd(self) -> Decimal:
        return TIGHT_LIMIT_USD if self.kind == "budget" else LIMIT_USD

    @property
    def from_repo(self) -> bool:
        return self.kind in ("pr", "branch")

    def toml(self, forge_url: str) -> str:
        text = (
            f'name = "chaos-{self.index}-{self.kind}"\nmodel = "claude-sonnet-4-6"\n'
            f"max_iterations = {ITERATIONS * 3}\nmax_turns = 10\nmax_tokens = 1024\n\n"
            f'[budget]\nlimit_usd = {self.limit_usd}\n\n[sandbox]\nmemory = "256m"\n'
        )
        if self.from_repo:
            pull_request = "ready" if self.kind == "pr" else "off"
            text += (
                f'\n[delivery]\npull_request = "{pull_request}"\nforge = "github"\napi_url = "{forge_url}"\n'
            )
        return text

    def write(self, directory: Path, forge_url: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "PROMPT.md").write_text(
            "Write one note per iteration under notes/ and record its effect, then say you are done.\n"
        )
        (directory / "raas.toml").write_text(self.toml(forge_url))
        return directory


def plan_projects(rng: random.Random, count: int, window_s: float) -> list[ProjectPlan]:
    """``count`` projects of kinds drawn from ``rng``, submitted at times spread over ``window_s``
    (the first at once, so a short soak has work when its first fault lands)."""
    kinds = rng.choices(KINDS, weights=KIND_WEIGHTS, k=count)
    times = sorted([0.0] + [rng.uniform(0, window_s) for _ in range(count - 1)])
    return [
        ProjectPlan(index, kind, round(at, 1))
        for index, (kind, at) in enumerate(zip(kinds, times, strict=True))
    ]


def dump(plans: list[ProjectPlan]) -> str:
    return json.dumps([plan.__dict__ for plan in plans])
