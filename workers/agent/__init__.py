"""One iteration's agent: the tool-use loop (``session``), its fresh context (``prompts``,
``context``) and the coalesced text it streams out (``output``).

May import ``shared``, ``workers.llm``, ``workers.tools`` and ``workers.sandbox``.
"""
