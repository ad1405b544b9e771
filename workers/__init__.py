"""The workers: Celery tasks that run iterations, the LLM client, the tools, the sandbox."""
