"""What the coordinator and the workers both import: settings, the database models (``models``),
the API schemas, raas.toml (``project_config``), events, errors, the budget and pricing, the
memory bank (``memory``) and SCUD task files (``scud``).

It imports neither ``orchestrator`` nor ``workers`` (a contract in pyproject.toml).
"""
