"""A server that speaks the Anthropic Messages API (and OpenAI's Responses API) from a script,
for tests, benchmarks and the offline demo: point the real ``anthropic`` SDK at it with
``base_url=`` / ``ANTHROPIC_BASE_URL``, or an agent CLI at its TCP port or unix socket.

The format of a script is documented in ``docs/scripted-model.md``. ``app`` answers, ``server``
serves it (a thread for tests, ``raas scripted-model`` for a process).

Outside the workers' layers: it imports ``shared`` only, and no module of ``workers`` imports
it.
"""

from workers.scripted_model.app import create_app
from workers.scripted_model.script import Script
from workers.scripted_model.server import ScriptedModelServer, serve
from workers.scripted_model.state import LoggedRequest

__all__ = ["LoggedRequest", "Script", "ScriptedModelServer", "create_app", "serve"]
