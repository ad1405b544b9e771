"""One iteration's agent, whatever runs it: its fresh context (``prompts``, ``context``), the
coalesced text it streams out (``output``) and the subagents it spawns (``subagents``). The
loop that drives it is a runner (:mod:`workers.runners.builtin`).

May import ``shared``, ``workers.llm``, ``workers.tools`` and ``workers.sandbox``.
"""
