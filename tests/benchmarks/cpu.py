"""CPU time by component over a span of a benchmark, from /proc: what each part of the stack (and
everything else on the machine) used, to tell a throughput bound by CPU from one bound by waiting.

A component is a set of process groups (a worker and its prefork children, the coordinator, the
scripted model), a set of processes by name (the Docker engine and its shims), or a process and
its children (a Postgres cluster's postmaster).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# docker-init is PID 1 inside each container: counted there (containers_s), not here.
DOCKER = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc")


def _stat(pid: str) -> tuple[str, int, int, float] | None:
    """(name, parent, process group, CPU seconds) of a process, or None if it is gone; its CPU
    includes that of the children it has reaped (git, a shell), which no sample would see alive."""
    try:
        text = (Path("/proc") / pid / "stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), int(fields[2]), sum(int(v) for v in fields[11:15]) / TICKS


def _processes() -> list[tuple[int, str, int, int, float]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(entry.name)) is not None:
            found.append((int(entry.name), *stat))
    return found


# Every container's processes together (cgroup v1 cpuacct, hierarchical: a removed container's
# time stays counted in its parent). Absent on a cgroup v2 host: then not reported.
CONTAINERS_CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")


def containers_s() -> float | None:
    """CPU seconds the processes inside every container have used (sandboxes' helpers, shells,
    commands), or None where the host does not say."""
    try:
        return int(CONTAINERS_CPUACCT.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def machine_busy_s() -> float:
    """CPU seconds every core has spent busy since boot (all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICKS


@dataclass
class Components:
    """Who is measured: name -> a predicate on (pid, name, parent, process group)."""

    parts: dict[str, Callable[[int, str, int, int], bool]] = field(default_factory=dict)

    def groups(self, name: str, pgids: Iterable[int]) -> None:
        wanted = set(pgids)
        self.parts[name] = lambda _pid, _name, _ppid, pgid: pgid in wanted

    def named(self, name: str, names: Iterable[str]) -> None:
        wanted = set(names)
        self.parts[name] = lambda _pid, pname, _ppid, _pgid: pname in wanted

    def tree(self, name: str, root: int) -> None:
        self.parts[name] = lambda pid, _name, ppid, _pgid: root in (pid, ppid)

    def sample(self) -> dict[str, float]:
        """CPU seconds so far, by component (of the processes alive now), and the machine's."""
        totals = dict.fromkeys(self.parts, 0.0)
        for pid, pname, ppid, pgid, cpu_s in _processes():
            for part, matches in self.parts.items():
                if matches(pid, pname, ppid, pgid):
                    totals[part] += cpu_s
        inside = containers_s()
        if inside is not None:
            totals["inside the containers"] = inside
        totals["machine (every process)"] = machine_busy_s()
        return totals


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds used between two samples, by component."""
    return {name: after[name] - before.get(name, 0.0) for name in after}
