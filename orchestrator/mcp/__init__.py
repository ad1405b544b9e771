"""The MCP server of the coordinator: a handful of project tools for MCP clients (agents, IDEs).

``tools`` (what each tool takes and does, written once), ``backends`` (what the tools call: the
coordinator's HTTP API for ``raas mcp`` over stdio, or the core in-process for the /mcp
endpoint), ``server`` (the SDK's server and the two transports).

May import the layers below it (``queries``, ``transcripts``, ``delivery``, ``scheduling``,
``remotes``) and ``shared``, and uses ``queries`` and ``scheduling``; never the edges above it
(``api`` mounts it, ``cli`` runs it over stdio) nor ``workers``.
"""
