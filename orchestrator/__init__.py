"""The coordinator service and the ``raas`` CLI, in layers (import-linter checks them):

- edges — ``api`` (HTTP routes), ``cli`` (the ``raas`` commands), ``service`` (the coordinator
  process), ``embedded`` (``raas run``: the whole system in one process);
- answers — ``queries`` (costs, graph, metrics, follow) and ``transcripts``;
- the core — ``scheduling``: the state machine that decides what runs next.

A layer imports only the layers below it. Only ``embedded`` and ``cli`` (composition roots) may
import ``workers``. docs/architecture.md draws the whole path of an iteration.
"""
