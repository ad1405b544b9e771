"""Read and write SCUD Graph v1 task files (`.scud/tasks/tasks.scg`), which users already keep.

The format is the one the `scud` CLI writes (pyrex41/scud, `formats/scg.rs`): phases (tags)
separated by `---`, each with a `# SCUD Graph v1` / `# Phase: tag` header, an `@meta { key value }`
block and the sections `@nodes`, `@edges`, `@parents`, `@assignments`, `@agents`, `@details`
(plus `@roles`, `@weave`, `@partitions`, `@locks`, kept but not used). We read more than scud
writes (`key: value` meta, priority and status words, no header, blank lines inside details)
and write exactly what it writes, so a file can go back and forth between the two tools.

A plain id names a task of the same phase, `phase:id` a task of any phase; the latter
(`ScudTask.key`) is the id the task gets in Constellation's DAG.
"""

from shared.scud.convert import to_task_specs
from shared.scud.model import CLOSED, PRIORITIES, STATUSES, ScudGraph, ScudPhase, ScudTask, status_code
from shared.scud.parse import parse_scg
from shared.scud.write import dump_scg, set_status, write_back

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
