"""Read-only answers the API and the CLI give: projects, costs and receipts, the task graph and
agent tree, the operators' metrics and live workers, following a project's events, and its
memory bank.

Nothing here changes a project. May import ``shared`` and the layers below it,
``orchestrator.scheduling`` (the row lookups, the workspaces) and ``orchestrator.remotes``; never
``transcripts`` or ``delivery`` (its siblings), the edges or ``workers``.
"""
