"""The model client: calling Claude through the official SDK (``client``), assembling its
stream (``stream``), classifying failures and backing off (``retry``), and the cluster-wide
rate limit (``ratelimit``).

May import ``shared`` only.
"""
