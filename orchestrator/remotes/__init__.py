"""Git over the network for the coordinator: tenants' credentials (encrypted at rest, handed to
git through a credential helper) and clone, fetch and push against users' remotes. Only the
coordinator talks to remotes; a worker's sandbox never sees a remote or a credential.

The lowest layer of ``orchestrator``: it imports ``shared`` only, and any package above it may
import it (``scheduling`` clones a project's source, ``delivery`` pushes, the edges set
credentials).
"""
