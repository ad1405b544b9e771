"""``python -m orchestrator.cli``."""

from orchestrator.cli import main

main()
