"""The workers: what runs an iteration, in layers that import only the layers below them
(import-linter checks them; the contracts are in pyproject.toml), top to bottom:

- ``main`` (``raas worker``), ``tasks`` (the Celery tasks), ``iteration`` (one iteration from
  its claim to its report);
- ``runners`` (one agent run, whatever its harness), ``agent`` (its prompts, context and
  output), ``gateway`` (the LLM gateway an agent CLI's calls go through);
- ``records`` (an iteration's end), ``ledger`` (every model call's money and messages),
  ``workspace_transfer``, ``llm`` (the model client) and ``tools``: side by side, none imports
  another;
- ``claim`` (claiming an iteration, heartbeats) and ``sandbox``, side by side at the bottom.

``scripted_model`` (the fake model server, at the network edge) stands outside the layers and
imports ``shared`` only. Never imports ``orchestrator``: workers reach the coordinator over HTTP
and Celery only.
"""
