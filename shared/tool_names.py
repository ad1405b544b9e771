"""The names of the tools an agent may be given, spelt once.

raas.toml's categories are checked against them (:mod:`shared.categories`), the CLI harnesses
are told them (:mod:`shared.harnesses`), and the workers' tools answer to them
(:mod:`workers.tools`, :mod:`workers.tools.coordination`): each of those takes its names from
here, so adding a tool starts with a name here.
"""

from __future__ import annotations

BASH = "bash"
READ = "read"
WRITE = "write"
EDIT = "edit"
GLOB = "glob"
GREP = "grep"

MEMORY_WRITE = "memory_write"
MEMORY_READ = "memory_read"
MEMORY_SEARCH = "memory_search"
SEND_MESSAGE = "send_message"

#: The engine's completion tool; a CLI harness reaches it through the completion marker.
TASK_COMPLETE = "task_complete"

#: The sandbox tools an agent may be given (task_complete and spawn_subagent are added by the engine).
SANDBOX_TOOLS = (BASH, READ, WRITE, EDIT, GLOB, GREP)
READ_ONLY_TOOLS = (READ, GLOB, GREP)
#: The tools answered from the database (the memory bank, messages between agents): every
#: category has them unless it says ``coordination = false``.
COORDINATION_TOOLS = (MEMORY_WRITE, MEMORY_READ, MEMORY_SEARCH, SEND_MESSAGE)
