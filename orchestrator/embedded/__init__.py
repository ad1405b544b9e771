"""The embedded engine: ``raas run DIR`` runs one project to its end in one process.

``engine`` is the distributed system on one machine (SQLite, an in-process worker, the same
scheduling code); ``run`` checks everything first and says how the project ended; ``live`` draws
it while it runs. A composition root: it may import ``workers``, ``shared`` and every package of
``orchestrator`` below it (all but ``cli``, which runs it).
"""
