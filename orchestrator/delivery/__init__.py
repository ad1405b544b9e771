"""Delivery: a project's work back to the user's git remote as branches and a pull request, as an
exactly-once outbox step (DESIGN.md rule 10).

The state machine decides (orchestrator.scheduling.deliveries writes the row and sends
``raas.deliver``); this package does: ``run.deliver`` pushes and opens or updates the pull request
(forges/ holds GitHub and GitLab), ``retry.redeliver`` is ``raas deliver ID``. It may import
``scheduling``, ``remotes`` and ``shared``; never ``queries`` or ``transcripts`` (its siblings),
the edges or ``workers``.
"""

from orchestrator.delivery.retry import redeliver
from orchestrator.delivery.run import deliver

__all__ = ["deliver", "redeliver"]
