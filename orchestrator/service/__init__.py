"""``raas coordinator``: the distributed coordinator process — the HTTP API served by uvicorn
and the consumer of the ``coordinator`` queue (``tasks``), with the reconcile loop beside them.

An edge below ``embedded`` and ``cli``: it may import ``dashboard``, ``api`` and every layer below
them, and ``shared``; never ``workers`` (tasks are sent by name).
"""
