"""``say_to_agent``, the MCP tool of ``raas say`` (issue #25 point 3: "raas say ... (and the
dashboard, MCP)"), through both transports: the coordinator's /mcp endpoint in-process and
``raas mcp`` over stdio (the API). What a tenant says is a ``person_said`` event by its token;
another tenant's project answers as an unknown one; a finished project refuses in one line.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.api.tenants import create_tenant
from shared import events
from tests.integration.test_mcp_http import IDLE, PROJECT, _answer, _error, mcp_session, raas_mcp
from tests.support.engine import engine
from tests.support.records import event_log

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_say_to_agent_reaches_the_timeline_through_both_transports(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine(IDLE, tmp_path) as eng:
        _, token = create_tenant(f"mcp-say-{tmp_path.name}")
        _, stranger = create_tenant(f"mcp-say-other-{tmp_path.name}")

        async def scenario() -> None:
            async with mcp_session(eng, token) as http, raas_mcp(eng, token) as stdio:
                # Given a tenant's running project
                project = _answer(await http.call_tool("submit_project", {"files": PROJECT}))
                project_id = project["id"]
                # When it says something over stdio, then --now in-process
                first = _answer(
                    await stdio.call_tool("say_to_agent", {"project_id": project_id, "text": "use tabs"})
                )
                second = _answer(
                    await http.call_tool(
                        "say_to_agent", {"project_id": project_id, "text": "stop", "now": True}
                    )
                )
                assert (first["project_id"], second["project_id"]) == (project_id, project_id)
                assert first["seq"] < second["seq"]
                # And another tenant tries: it answers as for an unknown project
                async with mcp_session(eng, stranger) as other:
                    refused = _error(
                        await other.call_tool("say_to_agent", {"project_id": project_id, "text": "hi"})
                    )
                assert refused == f"no project {project_id!r}; `raas ls` lists your projects"
                # And once the project is stopped, saying is refused in one line
                _answer(await http.call_tool("control_project", {"project_id": project_id, "action": "stop"}))
                ended = _error(
                    await stdio.call_tool("say_to_agent", {"project_id": project_id, "text": "late"})
                )
                assert "has ended (stopped)" in ended
                assert "\n" not in ended
            # Then the timeline holds the two, from the tenant's token, the second --now
            said = event_log(project_id, events.PERSON_SAID)
            assert [(e.data["text"], e.data["now"]) for e in said] == [("use tabs", False), ("stop", True)]
            assert all(e.data["author"].startswith("token:") for e in said)

        anyio.run(scenario)
