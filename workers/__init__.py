"""The workers: the Celery task that runs an iteration (``tasks``, ``iteration``, ``records``),
its agent (``agent``), the model client (``llm``), the tools (``tools``) and the sandbox they run
in (``sandbox``). ``main`` is ``raas worker``.

Never imports ``orchestrator``: workers reach the coordinator over HTTP and Celery only.
"""
