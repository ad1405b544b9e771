"""The memory bank and messages between agents through real iterations: the scripted model calls
memory_write, memory_read, memory_search and send_message through the real SDK, the worker answers
them from Postgres, and the next iterations see what was written and sent.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.client import ApiClient
from orchestrator.queries.memory import list_memory, search_memory
from orchestrator.queries.projects import project_detail
from orchestrator.scheduling import advance
from orchestrator.transcripts.model import Transcript
from orchestrator.transcripts.scg import parse, write
from orchestrator.transcripts.store import load_transcript
from shared import events
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.memory import ToolCall
from shared.models import Agent, AgentMessage, Iteration, MemoryVersion, utcnow
from shared.project_config import MemoryConfig
from tests.support.engine import Engine, engine
from tests.support.records import bodies, event_log, opening_text, text, tool, tool_results
from workers.claim import claim_iteration
from workers.scripted_model.script import Script
from workers.tools.coordination import Caller, answer

pytestmark = [pytest.mark.integration, pytest.mark.docker]

COMPLETE = tool("task_complete", {"summary": "done"})


def _calls(*blocks: dict[str, Any]) -> dict[str, Any]:
    """A script step calling several tools at once."""
    return {"content": [block for step in blocks for block in step["content"]]}


def _spawn(category: str, prompt: str) -> dict[str, Any]:
    return tool("spawn_subagent", {"category": category, "prompt": prompt})


def _agents(project_id: str) -> list[Agent]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at, Agent.id)
            )
        )


def _run_agent(eng: Engine, project_id: str, agent_id: str) -> None:
    """Run the agent's enqueued iteration (whatever else is queued before it), then advance."""
    with session_scope() as session:
        mine = set(session.scalars(select(Iteration.id).where(Iteration.agent_id == agent_id)))
    index = next(i for i, (_, iteration_id) in enumerate(eng.dispatcher.enqueued) if iteration_id in mine)
    _, iteration_id = eng.dispatcher.enqueued.pop(index)
    eng.runner().run(iteration_id)
    advance.advance(project_id, iteration_id, eng.dispatcher, eng.bus)


def _count(model: type[MemoryVersion | AgentMessage], project_id: str) -> int:
    with session_scope() as session:
        return int(
            session.scalar(select(func.count()).select_from(model).where(model.project_id == project_id)) or 0
        )


def _results(eng: Engine, project_id: str) -> list[dict[str, Any]]:
    """Every tool result the model was sent, in order (each request's newest message)."""
    found: dict[str, dict[str, Any]] = {}
    for body in bodies(eng, project_id):
        for result in tool_results(body["messages"][-1]):
            found.setdefault(result["tool_use_id"], result)
    return list(found.values())


def test_two_parallel_subagents_writing_one_key_leave_a_conflict_the_parents_next_iteration_reads(
    services: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = {
        "responses": [
            # The root spawns two parallel searchers and ends its turn.
            _calls(_spawn("searcher", "look at storage"), _spawn("searcher", "look at the API")),
            text("Spawned two searchers."),
            # Each writes the same key without having read the other's value.
            tool("memory_write", {"key": "plan", "value": "keep state in SQLite", "tags": ["storage"]}),
            text("Report: SQLite."),
            tool("memory_write", {"key": "plan", "value": "keep state in Postgres", "tags": ["storage"]}),
            text("Report: Postgres."),
            # The parent reads both, then resolves the conflict by writing.
            tool("memory_read", {"key": "plan"}),
            tool("memory_write", {"key": "plan", "value": "Postgres; SQLite when embedded"}),
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_to_end(project_id)

        root = _agents(project_id)[0]
        writes = event_log(project_id, events.MEMORY_WRITTEN)
        first, second = (w.agent_id for w in writes[:2])  # the searchers, in the order they ran
        read, written = _results(eng, project_id)[-2:]  # task_complete's result goes to no request
        # The parent's read shows both values with their writers, and says what to do.
        assert "'plan' is in conflict: 2 values were written without seeing each other" in read["content"]
        assert (
            f"version 1 by searcher {first} in iteration 1, tags: storage\nkeep state in SQLite"
            in read["content"]
        )
        assert f"version 2 by searcher {second} in iteration 1" in read["content"]
        assert "keep state in Postgres" in read["content"]
        assert written["content"] == "Wrote 'plan' (version 3)."
        assert not read["is_error"]

        (entry,) = list_memory(project_id)
        assert (entry.conflict, entry.version, [v.value for v in entry.values]) == (
            False,
            3,
            ["Postgres; SQLite when embedded"],
        )
        assert entry.values[0].agent_id == root.id
        assert [(e.data["version"], e.data["conflict"], e.agent_id) for e in writes] == [
            (1, False, first),
            (2, True, second),
            (3, False, root.id),
        ]
        assert {first, second} == {a.id for a in _agents(project_id) if a.depth == 1}
        memory = project_detail(project_id).memory
        assert memory is not None
        assert (memory.entries, memory.conflicts, memory.size_bytes) == (1, 0, len(entry.values[0].value))

        # Everywhere it shows: the transcript (and its scg form), the API, raas memory, raas replay
        api = ApiClient(eng.settings.coordinator_url, eng.settings.api_token.get_secret_value())
        transcript = Transcript.model_validate(api.transcript(project_id))
        assert [(w.key, w.version, w.conflict, w.agent) for w in transcript.memory] == [
            ("plan", 1, False, first),
            ("plan", 2, True, second),
            ("plan", 3, False, root.id),
        ]
        assert parse(write(transcript)) == transcript
        assert [e["key"] for e in api.memory(project_id, search="sqlite embedded")] == ["plan"]
        assert api.memory(project_id, search="kubernetes") == []
        with pytest.raises(InvalidInput, match="a search query must not be blank"):
            api.memory(project_id, search=" ")
        monkeypatch.setattr("orchestrator.cli.transcripts.api", lambda: api)
        shown = CliRunner().invoke(app, ["memory", project_id])
        assert shown.exit_code == 0, shown.output
        assert shown.output.splitlines()[:3] == [
            "plan  version 3",
            f"  v3 by builder {root.id} iteration 2 at {entry.values[0].written_at:%Y-%m-%d %H:%M:%S}",
            "    Postgres; SQLite when embedded",
        ]
        replayed = CliRunner().invoke(app, ["replay", project_id, "--max-wait", "0"])
        assert replayed.exit_code == 0, replayed.output
        writes_shown = [line for line in replayed.output.splitlines() if line[8:22] == " memory_write "]
        assert len(writes_shown) == 3  # each in its place between the messages
        api.close()


def test_full_text_search_ranks_the_matching_entry_first(services: dict[str, str], tmp_path: Path) -> None:
    notes = {
        "ui": "The dashboard draws charts with uPlot.",
        "tests": "Run the database tests against a real Postgres database, never a mock.",
        "deploy": "Workers scale with docker compose; Postgres is shared.",
    }
    script = {
        "responses": [
            _calls(*(tool("memory_write", {"key": key, "value": value}) for key, value in notes.items())),
            tool("memory_search", {"query": "postgres database tests"}),
            COMPLETE,
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        search = _results(eng, project_id)[-1]
        assert search["content"].splitlines()[:2] == [
            "1 key(s) match 'postgres database tests', best first:",
            f"1. 'tests' (version 1 by builder {_agents(project_id)[0].id} in iteration 1): {notes['tests']}",
        ]
        ranked = search_memory(project_id, "postgres")
        assert [e.key for e in ranked][0] == "tests"  # "database", twice, ranks it above deploy
        assert {e.key for e in ranked} == {"tests", "deploy"}


def test_limits_and_bad_input_answer_the_model_with_an_error_and_store_nothing(
    services: dict[str, str], tmp_path: Path
) -> None:
    bad = [
        tool("memory_write", {"key": "", "value": "x"}),
        tool("memory_write", {"key": "big", "value": "x" * 101}),
        tool("memory_write", {"key": "k", "value": "x", "tags": ["not a tag"]}),
        tool("memory_read", {"key": "line\nbreak"}),
        tool("memory_search", {"query": 42}),
        tool("memory_search", {"query": "   "}),
        tool("send_message", {"to": "nobody", "text": "hello"}),
        tool("send_message", {"to": "parent", "text": "hello"}),
        tool("send_message", {"to": "broadcast", "text": ""}),
        tool("memory_write", {"key": "first", "value": "fits"}),
        tool("memory_write", {"key": "second", "value": "one key too many"}),
    ]
    script = {"responses": [_calls(*bad), COMPLETE]}
    toml = "[memory]\nmax_entry_bytes = 100\nmax_entries = 1\n"
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)

        results = _results(eng, project_id)[: len(bad)]
        messages = [(r["is_error"], r["content"]) for r in results]
        assert messages == [
            (True, "memory_write: argument 'key': string should have at least 1 character"),
            (
                True,
                "memory_write: the value is 101 bytes; this project's limit is 100 (raas.toml [memory] "
                "max_entry_bytes): store less, or split it over several keys",
            ),
            (True, "memory_write: argument 'tags.0': a tag may hold only letters, digits and _ . : / -"),
            (True, "memory_read: argument 'key': a key must be one line of text (no control characters)"),
            (True, "memory_search: argument 'query': input should be a valid string"),
            (True, "memory_search: argument 'query': a search query must not be blank"),
            (
                True,
                "send_message: unknown recipient 'nobody': send to parent, broadcast, or an agent of this "
                "project (there is no other)",
            ),
            (True, "send_message: you have no parent agent; send to an agent id or broadcast"),
            (True, "send_message: argument 'text': string should have at least 1 character"),
            (False, "Wrote 'first' (version 1)."),
            (
                True,
                "memory_write: the memory bank is full (1 keys, raas.toml [memory] max_entries); "
                "write to a key that exists instead of a new one",
            ),
        ]
        assert _count(MemoryVersion, project_id) == 1
        assert _count(AgentMessage, project_id) == 0
        assert len(event_log(project_id, events.MEMORY_WRITTEN)) == 1
        assert event_log(project_id, events.MESSAGE_SENT) == []


def test_messages_reach_a_siblings_next_iteration_once_and_in_order(
    services: dict[str, str], tmp_path: Path
) -> None:
    toml = 'subagent_max_iterations = 3\n[categories.helper]\ntools = ["read"]\nprompt = "Help: {task}"\n'
    spawning = {
        "responses": [_calls(_spawn("helper", "wait for news"), _spawn("searcher", "find news")), text("ok")]
    }
    with engine(spawning, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)
        root, helper, searcher = sorted(_agents(project_id), key=lambda a: (a.depth, a.category != "helper"))
        assert (helper.category, searcher.category) == ("helper", "searcher")

        # The rest of the run, now that the test knows the agents' ids.
        eng.model.reset(
            Script.model_validate(
                {
                    "responses": [
                        text("Helper, first iteration: nothing yet."),
                        _calls(
                            tool("send_message", {"to": helper.id, "text": "first news"}),
                            tool("send_message", {"to": helper.id, "text": "second news"}),
                            tool("send_message", {"to": "parent", "text": "for the root"}),
                        ),
                        text("Report: sent the news."),
                        text("Helper, second iteration."),
                        COMPLETE,
                        COMPLETE,
                    ]
                }
            )
        )
        _run_agent(eng, project_id, helper.id)  # iteration 1: before any message
        _run_agent(eng, project_id, searcher.id)  # sends two to the helper, one to the root
        _run_agent(eng, project_id, helper.id)  # iteration 2: both, in order
        _run_agent(eng, project_id, helper.id)  # iteration 3: nothing again
        _run_agent(eng, project_id, root.id)

        openings = [opening_text(body["messages"][0]) for body in bodies(eng, project_id)]
        helper_openings = [o for o in openings if f"helper agent {helper.id}" in o]
        assert len(helper_openings) == 3
        first, second, third = helper_openings
        assert "Message from" not in first
        assert second.count("first news") == 1
        assert second.index("first news") < second.index("second news")
        assert f"Message from searcher agent {searcher.id}:\nfirst news" in second
        assert "Message from" not in third
        (root_opening,) = [o for o in openings if f"builder agent {root.id}" in o]
        assert "for the root" in root_opening
        sent = event_log(project_id, events.MESSAGE_SENT)
        assert [(e.data["to"], e.data["text"]) for e in sent] == [
            (helper.id, "first news"),
            (helper.id, "second news"),
            ("parent", "for the root"),
        ]
        mail = load_transcript(project_id).mail
        assert [(m.agent, m.to, m.text) for m in mail] == [
            (searcher.id, [helper.id], "first news"),
            (searcher.id, [helper.id], "second news"),
            (searcher.id, [root.id], "for the root"),
        ]
        assert [m.text for m in load_transcript(project_id, helper.id).mail] == ["first news", "second news"]


def test_a_redelivered_iteration_writes_and_sends_nothing_twice(
    services: dict[str, str], tmp_path: Path
) -> None:
    calls = _calls(
        tool("memory_write", {"key": "k", "value": "v"}, use_id="toolu_write"),
        tool("send_message", {"to": "broadcast", "text": "hello"}, use_id="toolu_send"),
    )
    spawning = {"responses": [_spawn("helper", "listen"), text("spawned")]}
    toml = '[categories.helper]\ntools = ["read"]\n'
    with engine(spawning, tmp_path) as eng:
        project_id = eng.submit(raas_toml=toml)
        eng.run_next(project_id)
        _, helper = _agents(project_id)
        iteration_id = eng.dispatcher.take(project_id)
        assert iteration_id is not None

        # Given: a worker claimed the helper's iteration, answered both tool calls, and died.
        dead = claim_iteration(iteration_id, "dead-worker", stale_after_s=30)
        assert dead is not None
        for use_id, name, args in [
            ("toolu_write", "memory_write", {"key": "k", "value": "v"}),
            ("toolu_send", "send_message", {"to": "broadcast", "text": "hello"}),
        ]:
            call = ToolCall(project_id, helper.id, iteration_id, use_id)
            assert not answer(Caller(call, dead.memory_bank, MemoryConfig()), name, args).result.is_error
        with session_scope() as session:
            session.execute(
                update(Iteration)
                .where(Iteration.id == iteration_id)
                .values(heartbeat_at=utcnow() - timedelta(minutes=10))
            )

        # When: the iteration is delivered again and its model makes the same calls
        eng.model.reset(Script.model_validate({"responses": [calls, COMPLETE]}))
        claim = eng.runner("live-worker").run(iteration_id)
        assert claim is not None
        assert claim.attempt == 2

        # Then: one write, one message, one event of each
        assert _count(MemoryVersion, project_id) == 1
        assert _count(AgentMessage, project_id) == 1
        assert len(event_log(project_id, events.MEMORY_WRITTEN)) == 1
        assert len(event_log(project_id, events.MESSAGE_SENT)) == 1
        # And the model is told what the first attempt did
        write, send = _results(eng, project_id)
        assert write["content"] == "Wrote 'k' (version 1)."
        assert not send["is_error"]
        assert send["content"].startswith(f"Sent to {_agents(project_id)[0].id};")
