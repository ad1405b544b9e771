"""The agent CLIs people use (Claude Code, Codex, OpenCode) as runners: one module per CLI (its
command line and environment, its output parser), and the one runner that runs any of them in
the iteration's container (``runner``), its output parsed into the project's own events and
its end judged honestly (``ending``).

May import ``shared``, ``workers.agent`` (the prompt), ``workers.gateway``, ``workers.claim``
and ``workers.sandbox``.
"""
