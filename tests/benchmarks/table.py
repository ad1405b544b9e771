"""The table every end-to-end benchmark prints: each figure, ours against the raw baseline
measured in the same run, with the ratio and the goal; then the checks that must hold."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Figure:
    """One line of the table: ours against the raw baseline measured in the same run."""

    name: str
    ours: float
    baseline: float
    unit: str
    baseline_name: str
    goal_max: float | None = None
    goal_min: float | None = None

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("inf")

    def goal(self) -> str:
        if self.goal_max is not None and self.goal_min is not None:
            return f"{self.goal_min:g}-{self.goal_max:g}x"
        if self.goal_max is not None:
            return f"<= {self.goal_max:g}x"
        if self.goal_min is not None:
            return f">= {self.goal_min:g}x"
        return "-"

    def met(self) -> str:
        if self.goal_max is None and self.goal_min is None:
            return "-"
        low = self.goal_min if self.goal_min is not None else float("-inf")
        high = self.goal_max if self.goal_max is not None else float("inf")
        return "met" if low <= self.ratio <= high else "NOT MET"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Table:
    figures: list[Figure] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def print(self) -> None:
        rows = [
            (
                f.name,
                f"{f.ours:.2f}",
                f"{f.baseline:.2f}",
                f.unit,
                f.baseline_name,
                f"{f.ratio:.3f}x",
                f.goal(),
                f.met(),
            )
            for f in self.figures
        ]
        head = ("figure", "ours", "baseline", "unit", "baseline is", "ratio", "goal", "result")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        right = {1, 2, 5}  # numbers
        for index, row in enumerate([head, *rows]):
            cells = [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            print("  ".join(cells).rstrip())
            if index == 0:
                print("-" * (sum(widths) + 2 * (len(widths) - 1)))
        if self.checks:
            print()
            width = max(len(c.name) for c in self.checks)
            for c in self.checks:
                print(f"{c.name:<{width}}  {'ok' if c.ok else 'FAILED':<6}  {c.detail}")

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)
