"""``raas coordinator``: the distributed coordinator process — the HTTP API served by uvicorn
and the consumer of the ``coordinator`` queue (``tasks``), with the reconcile loop beside them.

An edge: it may import everything in ``orchestrator`` and ``shared``; never ``workers`` (tasks
are sent by name).
"""
