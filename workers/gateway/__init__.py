"""The per-iteration LLM gateway: a unix socket in the worker, bind-mounted into a harness's
container, that swaps a revocable token for the real key and is the one gate every harness model
call goes through (reservation, rate limits, metering from the stream, recording) — DESIGN.md rule 9.

``server`` holds the sockets and the relay, ``gate`` the budget, rate limits and ledger of each
call, ``recorder`` its ledger writes after the answer, ``metering`` what a call used, read from
its answer; ``relay.py`` is a stdlib script run inside a container (loopback TCP to the socket)
for harnesses that cannot speak to a unix socket.

May import the layers below it (``records``, ``ledger``, ``workspace_transfer``, ``llm``,
``tools``, ``claim``, ``sandbox``) and ``shared``; never ``agent``, ``runners`` or what is above them.
"""

from workers.gateway.gate import GatewayStats
from workers.gateway.server import CONTAINER_SOCKET_DIR, SOCKET_NAME, Gateway, GatewayLease

__all__ = ["CONTAINER_SOCKET_DIR", "SOCKET_NAME", "Gateway", "GatewayLease", "GatewayStats"]
