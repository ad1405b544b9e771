"""The soak's projects: one scripted model script, several kinds of project.

Every project walks the same script from its first step (the scripted model keeps a cursor per
project): iteration *k* writes ``notes/k.md``, then runs ``bash`` in its sandbox, which sleeps
(the window a fault lands in) and appends the line ``step k`` to ``effects.log``; then it ends its
turn; the last iteration says it is done (``task_complete``, or for an agent CLI the project's
completion marker), which also answers every request past the end, so a re-run attempt (which
takes the script's next steps) still leads to the end. ``effects.log`` is the iteration's side
effect: a line twice in the final workspace is an effect applied twice. The other agents of a
workflow (research subagents, the planner, the reviewer) and each agent CLI walk steps of their
own (the script's variants, docs/scripted-model.md), each with its own cursor per project.

The kinds (drawn from the seed):

- ``pr``: started from the loopback git server's repository, delivered as a branch and a ready
  pull request on the fake forge (which the project then follows: it ends ``delivered``);
- ``branch``: from the repository, delivered as a branch only (``pull_request = "off"``);
- ``local``: uploaded from a directory, not delivered;
- ``budget``: uploaded, with a budget that pays for only a few calls: it must stop at its
  limit (paused, ``budget_exceeded``) without spending past it;
- the workflows ``pipeline`` (a searcher first, the check command as the gate), ``planned`` (a
  planner writes the one-task plan) and ``dialectic`` (a reviewer after each builder iteration,
  two rounds), and the agent CLIs ``claude-code``, ``codex`` and ``opencode`` (the loop above
  through each CLI's own tools): each from the repository, delivered as a branch.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.support.faults import USAGE
from tests.support.harness_calls import HARNESS_CALLS, HarnessCalls

ITERATIONS = 6
REPO = "alice/app"
WORKFLOWS = ("pipeline", "planned", "dialectic")
KINDS = ("pr", "branch", "local", "budget", *WORKFLOWS, *HARNESS_CALLS)
KIND_WEIGHTS = (3, 2, 2, 1, 1, 1, 1, 1, 1, 1)
DELIVERED_BRANCH = ("branch", *WORKFLOWS, *HARNESS_CALLS)
MARKER = "TASK COMPLETE"
"""An agent CLI's project ends its last iteration with this (its ``completion_marker``)."""
# What the agent CLIs' first message says and ours does not (workers/runners/cli/base.py): the
# variant of OpenCode, whose tools are named as ours, comes after Claude Code's and Codex's.
CLI_PROMPT = "that ends the task. The workspace is"
# The gate of the pipeline and dialectic projects: any note written (a fault may take the one
# that writes the last note, and the gate must not then send the builder round for ever).
CHECK = "ls notes/*.md"
LIMIT_USD = Decimal(5)
# A reply costs $0.00375 here; one call's worst case (4,000 tokens in, 1,024 out) $0.03036, the
# least limit a project may have: a few iterations, then the gate.
TIGHT_LIMIT_USD = Decimal("0.05")


def _message(*blocks: dict[str, Any], latency_s: float) -> dict[str, Any]:
    return {"content": list(blocks), "usage": USAGE, "latency_s": latency_s}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": args}


def _opening(number: int) -> dict[str, Any]:
    """What an iteration's first reply says, whichever harness asked."""
    return _text(f"Iteration {number}: note {number} and its effect.")


def _effect(number: int, sleep_s: float) -> str:
    # Not `sleep N; ...`: Claude Code refuses a sleep followed by a command.
    return f"python3 -c 'import time; time.sleep({sleep_s})' && echo 'step {number}' >> effects.log"


def _builder(sleep_s: float, latency_s: float) -> list[dict[str, Any]]:
    """Our own loop's steps (the api harness): a note and its effect per iteration."""
    steps: list[dict[str, Any]] = []
    for number in range(1, ITERATIONS + 1):
        note = f"notes/{number}.md"
        steps.append(
            _message(
                _opening(number),
                _call("write", path=note, content=f"note {number}\n"),
                _call("bash", command=f"{_effect(number, sleep_s)} && cat {note}"),
                latency_s=latency_s,
            )
        )
        if number == ITERATIONS:
            steps.append(_message(_call("task_complete", summary="all notes written"), latency_s=latency_s))
        else:
            steps.append(
                _message(_text(f"Note {number} is written; the next iteration goes on."), latency_s=latency_s)
            )
    return steps


def _cli(harness: HarnessCalls, sleep_s: float, latency_s: float) -> list[dict[str, Any]]:
    """An agent CLI's steps: each of its iterations is one run of the CLI, three model calls."""
    steps: list[dict[str, Any]] = []
    for number in range(1, ITERATIONS + 1):
        steps.append(
            _message(
                _opening(number),
                harness.write(f"notes/{number}.md", f"note {number}\n"),
                latency_s=latency_s,
            )
        )
        steps.append(_message(harness.run(_effect(number, sleep_s)), latency_s=latency_s))
        said = f"All notes are written. {MARKER}" if number == ITERATIONS else f"Note {number} is written."
        steps.append(_message(_text(said), latency_s=latency_s))
    return steps


def _variant(name: str, steps: list[dict[str, Any]], **when: str) -> dict[str, Any]:
    return {"name": name, "when": when, "responses": steps, "when_exhausted": "repeat_last"}


def script(sleep_s: float = 2.0, latency_s: float = 0.3) -> dict[str, Any]:
    """The one script every project walks (see the module docstring)."""
    plan = {
        "objectives": ["one note per iteration"],
        "exit_criteria": ["notes/ holds the notes"],
        "tasks": [
            {"id": "notes", "title": "Write the notes", "description": "A note and its effect each time."}
        ],
    }
    done = _call("task_complete", summary="notes/ holds the notes; effects.log their effects.")
    clis = [
        _variant(
            name,
            _cli(harness, sleep_s, latency_s),
            **({"offers_tool": harness.offers} if harness.offers else {"prompt_contains": CLI_PROMPT}),
        )
        for name, harness in sorted(HARNESS_CALLS.items(), key=lambda item: item[1].offers is None)
    ]
    return {
        "responses": _builder(sleep_s, latency_s),
        "when_exhausted": "repeat_last",
        "variants": [
            _variant("searcher", [_message(done, latency_s=latency_s)], prompt_contains="You are a searcher"),
            _variant(
                "planner",
                [_message(_call("submit_plan", **plan), latency_s=latency_s)],
                prompt_contains="You are the planner",
            ),
            _variant(
                "reviewer",
                [
                    _message(
                        _call("task_complete", summary="The note and its effect look right."),
                        latency_s=latency_s,
                    )
                ],
                prompt_contains="You are the reviewer",
            ),
            *clis,
        ],
    }


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
        return self.kind == "pr" or self.kind in DELIVERED_BRANCH

    def toml(self, forge_url: str) -> str:
        cli = self.kind in HARNESS_CALLS
        text = f'name = "chaos-{self.index}-{self.kind}"\n'
        if cli:  # its own default model (Codex's is an OpenAI one)
            text += f'harness = "{self.kind}"\ncompletion_marker = "{MARKER}"\n'
        else:
            text += 'model = "claude-sonnet-4-6"\n'
        if self.kind in WORKFLOWS:
            text += f'workflow = "{self.kind}"\n'
        if self.kind in ("pipeline", "dialectic"):
            text += f'check_command = "{CHECK}"\n'
        if self.kind == "pipeline":
            text += 'research = ["searcher"]\n'
        memory = "1g" if cli else "256m"  # an agent CLI is a Node program (or Codex's own)
        text += (
            f"max_iterations = {ITERATIONS * 3}\nmax_turns = 10\nmax_tokens = 1024\n\n"
            f'[budget]\nlimit_usd = {self.limit_usd}\n\n[sandbox]\nmemory = "{memory}"\n'
        )
        if self.kind == "dialectic":
            text += "\n[dialectic]\nreview_rounds = 2\n"
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
