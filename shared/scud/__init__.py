"""Read and write SCUD Graph v1 task files (`.scud/tasks/tasks.scg`), which users already keep."""

from shared.scud.parse import (
    CLOSED,
    PRIORITIES,
    STATUSES,
    ScudGraph,
    ScudPhase,
    ScudTask,
    dump_scg,
    parse_scg,
    set_status,
    status_code,
    to_task_specs,
    write_back,
)

__all__ = [
    "CLOSED",
    "PRIORITIES",
    "STATUSES",
    "ScudGraph",
    "ScudPhase",
    "ScudTask",
    "dump_scg",
    "parse_scg",
    "set_status",
    "status_code",
    "to_task_specs",
    "write_back",
]
