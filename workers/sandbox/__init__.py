"""Where an iteration's tools run: a hardened Docker container, or a local subprocess.

``base`` holds the interface and limits; ``docker`` the production sandbox (with ``channel``,
``helper`` and ``fallback`` behind it); ``local`` the no-Docker one; ``factory`` starts an
iteration's sandbox from its config (``choice`` picks an embedded run's, ``pool`` keeps warm
Docker ones); ``reaper`` removes the containers of dead iterations and ``sweeper`` runs it
periodically in a worker.

The bottom layer of ``workers``: it may import ``shared`` only (not even ``claim``, beside it).
"""

from workers.sandbox.base import ExecResult, Sandbox, SandboxLimits

__all__ = ["ExecResult", "Sandbox", "SandboxLimits"]
