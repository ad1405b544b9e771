"""A project's environment on a worker host: its setup run once and snapshotted, and the network
level of its containers (issue #26; DESIGN.md rule 4).

What it holds: ``prepare`` (:class:`Environments`, what the iteration runner asks for an
iteration's image, variables and network), ``snapshot`` (the setup's container, the commit, the
key, the push to and pull from an operator's registry and the garbage collection of old
snapshots) and ``proxy`` (the allow-listing egress proxy of the ``registries`` level). It imports
the sandbox's container settings, never a runner.
"""

from workers.environment.prepare import Environments, Prepared, read_environment
from workers.environment.proxy import EgressProxy
from workers.environment.snapshot import SetupFailed

__all__ = ["EgressProxy", "Environments", "Prepared", "SetupFailed", "read_environment"]
