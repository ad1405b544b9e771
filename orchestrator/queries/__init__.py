"""Read-only answers the API and the CLI give: projects, costs and receipts, the task graph and
agent tree, the operators' metrics and live workers, following a project's events, and its
memory bank.

Nothing here changes a project. May import ``shared`` and ``orchestrator.scheduling`` (for the
row lookups); never ``workers`` or the edges.
"""
