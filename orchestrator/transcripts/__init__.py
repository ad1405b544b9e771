"""A project's transcript: the model of it (``model``), read from the database (``store``),
written and parsed in the compact scg format (the ``scg`` package: its layout, cells, writer and
parser), read from a file in either format (``files``), and rendered for people (``render``).

May import ``shared`` and the layers below it, ``orchestrator.scheduling`` (``store`` looks the
project up) and ``orchestrator.remotes``; never ``queries`` or ``delivery`` (its siblings), the
edges above it, or ``workers``.
"""
