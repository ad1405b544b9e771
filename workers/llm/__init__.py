"""The model client: calling Claude through the official SDK (``client``), assembling its
stream (``stream``), classifying failures and backing off (``retry``), and the cluster-wide
rate limit (``ratelimit``).

Imports ``shared`` only (the layers contract would also let it import ``claim`` and ``sandbox``
below it); never ``tools``, ``records``, ``ledger`` (its siblings) or anything above it.
"""
