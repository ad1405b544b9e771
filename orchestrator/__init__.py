"""The coordinator (HTTP API, scheduler) and the ``raas`` CLI."""
