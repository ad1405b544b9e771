"""The coordinator service and the ``raas`` CLI, in layers that import only the layers below them
(import-linter checks them; the contracts are in pyproject.toml), top to bottom:

- ``cli`` (the ``raas`` commands) and ``embedded`` (``raas run``: the whole system in one
  process): the composition roots, the only packages here that may import ``workers``;
- ``service`` (the coordinator process), ``dashboard`` (the web pages), ``api`` (HTTP routes)
  and ``mcp`` (the MCP tools): the other edges, in that order;
- ``queries`` (read-only answers), ``transcripts`` and ``delivery`` (a project's work back to its
  remote): side by side, none imports another;
- ``scheduling``: the state machine that decides what runs next;
- ``remotes``: git against users' remotes, with their credentials.

docs/architecture.md draws the whole path of an iteration.
"""
