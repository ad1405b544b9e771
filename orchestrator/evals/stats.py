"""The numbers of an eval report, as pure functions of outcomes (no database).

- resolve rate with a bootstrap 95% interval: tasks resampled with replacement (a task's attempts
  stay together, so the interval reflects how many tasks there are, not attempts);
- pass@k (the unbiased estimator of Chen et al. 2021: 1 - C(n-c, k) / C(n, k)) and pass^k
  (all k of k succeed: C(c, k) / C(n, k), tau-bench), averaged over tasks;
- McNemar's exact test (two-sided binomial on the discordant pairs) and a paired bootstrap, for
  comparing two configurations task by task.

The bootstrap's random generator is seeded: the same outcomes give the same interval.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from math import comb

BOOTSTRAP_SAMPLES = 2000
SEED = 27
WORK_PER_BOOTSTRAP = 400_000  # tasks drawn, over all resamples


def resolve_rate(outcomes: Mapping[str, Sequence[bool]]) -> float | None:
    """Resolved attempts over all attempts (infrastructure failures count as not resolved)."""
    total = sum(len(v) for v in outcomes.values())
    return sum(sum(v) for v in outcomes.values()) / total if total else None


def _samples(tasks: int, samples: int) -> int:
    """Fewer resamples for a suite of thousands of tasks: the work stays bounded (a report over
    10,000 attempts is a benchmark's subject), the interval's percentiles barely move."""
    return max(200, min(samples, WORK_PER_BOOTSTRAP // max(tasks, 1)))


def bootstrap_interval(
    outcomes: Mapping[str, Sequence[bool]], samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED
) -> tuple[float, float] | None:
    """The 2.5th and 97.5th percentiles of the resolve rate over tasks resampled with replacement."""
    tasks = [v for v in outcomes.values() if v]
    if not tasks:
        return None
    # Each task as one integer, resolved * SCALE + attempts: a resample's sum carries both totals.
    scale = sum(len(v) for v in tasks) * len(tasks) + 1
    packed = [sum(v) * scale + len(v) for v in tasks]
    rng = random.Random(seed)
    samples = _samples(len(tasks), samples)
    rates = []
    for _ in range(samples):
        resolved, attempts = divmod(sum(rng.choices(packed, k=len(packed))), scale)
        rates.append(resolved / attempts)
    rates.sort()
    return rates[int(0.025 * (samples - 1))], rates[int(0.975 * (samples - 1))]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k attempts drawn from n (c of them correct) is correct."""
    if k > n:
        k = n
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all k attempts drawn from n (c of them correct) are correct."""
    if k > n:
        k = n
    return comb(c, k) / comb(n, k) if k else 1.0


def mean_over_tasks(outcomes: Mapping[str, Sequence[bool]], k: int, estimator: str) -> float | None:
    """pass@k (``estimator="at"``) or pass^k (``"hat"``), averaged over the tasks with attempts."""
    fn = pass_at_k if estimator == "at" else pass_hat_k
    values = [fn(len(v), sum(v), k) for v in outcomes.values() if v]
    return sum(values) / len(values) if values else None


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact p-value of McNemar's test: discordant pairs as a fair coin's flips."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(
    pairs: Mapping[str, Sequence[tuple[bool, bool]]], samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED
) -> tuple[float, float, float] | None:
    """(B's rate - A's rate): its 95% interval over tasks resampled with replacement, and the
    two-sided bootstrap p-value (twice the smaller share of resamples on either side of 0)."""
    tasks = [v for v in pairs.values() if v]
    if not tasks:
        return None
    # (B's wins - A's wins + pairs), never negative, packed with the pairs as in bootstrap_interval.
    scale = 2 * sum(len(v) for v in tasks) * len(tasks) + 1
    packed = [(sum(int(b) - int(a) for a, b in v) + len(v)) * scale + len(v) for v in tasks]
    rng = random.Random(seed)
    samples = _samples(len(tasks), samples)
    diffs = []
    for _ in range(samples):
        shifted, n = divmod(sum(rng.choices(packed, k=len(packed))), scale)
        diffs.append((shifted - n) / n)
    diffs.sort()
    below = sum(1 for d in diffs if d <= 0) / samples
    above = sum(1 for d in diffs if d >= 0) / samples
    return (
        diffs[int(0.025 * (samples - 1))],
        diffs[int(0.975 * (samples - 1))],
        min(1.0, 2 * min(below, above)),
    )
