"""A project's transcript: the model of it (``model``), read from the database (``store``),
written and parsed in the compact scg format (``scg``, with its cell syntax in ``scg_cells``),
and rendered for people (``render``).

May import ``shared`` and ``orchestrator.scheduling``; never ``workers`` or the edges.
"""
