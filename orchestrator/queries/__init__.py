"""Read-only answers the API and the CLI give: costs and receipts, the task graph and agent
tree, the operators' metrics, and following a project's events.

Nothing here changes a project. May import ``shared`` and ``orchestrator.scheduling`` (for the
row lookups); never ``workers`` or the edges.
"""
