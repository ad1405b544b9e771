"""A CPU quota for a process and the children it forks later, through a cgroup of the benchmark's
own: what a Kubernetes pod's ``resources.limits.cpu`` gives a container, here on one machine.

bench_replicas gives each coordinator replica the same quota, so that one replica is what limits
the load (as it would be on a host of its own) while Postgres, Redis and the null workers have the
rest of the machine; without it, on a 2-core machine, the neighbours saturate the cores first and
the figure says nothing about the coordinator. cgroup v2 (``cpu.max``) and v1 (the ``cpu``
controller's ``cpu.cfs_quota_us``) are both handled; root is needed to make the group.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")


class QuotaUnavailable(RuntimeError):
    """No cgroup CPU controller this process may use."""


def _root() -> tuple[Path, bool]:
    """The hierarchy to make groups in, and whether it is cgroup v2."""
    if (V2_ROOT / "cgroup.controllers").exists():
        if "cpu" not in (V2_ROOT / "cgroup.controllers").read_text().split():
            msg = "cgroup v2 has no cpu controller here: run with --replica-cpu 0 (no quota)"
            raise QuotaUnavailable(msg)
        return V2_ROOT, True
    if (V1_ROOT / "cpu.cfs_quota_us").exists():
        return V1_ROOT, False
    msg = f"no cgroup cpu controller under {V2_ROOT}: run with --replica-cpu 0 (no quota)"
    raise QuotaUnavailable(msg)


class Quotas:
    """Groups of ``cores`` CPU each; every group is removed on :meth:`close` (its processes are
    moved back to the root first, if any still run)."""

    def __init__(self, cores: float) -> None:
        self.cores = cores
        self._root, self._v2 = _root()
        self._groups: list[Path] = []

    def limit(self, pid: int) -> Path:
        """Put ``pid`` (and what it forks from now on) in a new group of ``cores`` CPU."""
        group = self._root / f"raas-bench-{secrets.token_hex(4)}"
        try:
            group.mkdir()
            quota = round(self.cores * PERIOD_US)
            if self._v2:
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            self._groups.append(group)
            (group / "cgroup.procs").write_text(str(pid))
        except PermissionError as exc:
            why = exc.strerror
            msg = f"cannot make a cgroup under {self._root} ({why}): run as root, or with --replica-cpu 0"
            raise QuotaUnavailable(msg) from exc
        return group

    def throttled_s(self) -> float:
        """Seconds the groups' processes waited for their quota, summed over the groups."""
        total = 0.0
        for group in self._groups:
            with contextlib.suppress(OSError):
                for line in (group / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "throttled_usec":
                        total += int(value) / 1e6
                    elif key == "throttled_time":
                        total += int(value) / 1e9
        return total

    def close(self) -> None:
        for group in self._groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self._root / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                group.rmdir()
        self._groups.clear()


@contextlib.contextmanager
def quotas(cores: float) -> Iterator[Quotas | None]:
    """Quotas of ``cores`` CPU each, or None when ``cores`` is 0 (no limit)."""
    if cores <= 0:
        yield None
        return
    made = Quotas(cores)
    try:
        yield made
    finally:
        made.close()
