"""Harnesses: the agent CLIs people use (Claude Code, Codex, OpenCode) run inside an iteration's
container, their output parsed into the project's own events and their end judged honestly."""
