"""The memory bank's rules and the messages between agents, on both databases: concurrent writes
are kept and flagged, a reader resolves them, search ranks, limits refuse, a repeated tool call
changes nothing, messages are delivered once and in order.

The rules (shared.memory, shared.mailbox) run against a migrated Postgres database (the test
session's) and a migrated SQLite file (the embedded engine's), with the full-text index migration
0004 makes for each.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from shared import mailbox, memory
from shared.db import get_engine
from shared.errors import InvalidInput
from shared.migrate import upgrade
from shared.models import (
    Agent,
    AgentMessage,
    AgentStatus,
    Event,
    Iteration,
    MemoryVersion,
    Project,
    ProjectStatus,
    new_id,
    utcnow,
)
from shared.project_config import MemoryConfig

pytestmark = pytest.mark.integration

LIMITS = MemoryConfig()


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One database of each kind for the module; every test makes a project of its own in it."""
    if request.param == "postgres":
        yield get_engine(request.getfixturevalue("database_url"))
        return
    url = f"sqlite:///{tmp_path_factory.mktemp('memory') / 'raas.db'}"
    upgrade(url)
    engine = get_engine(url)  # WAL and BEGIN IMMEDIATE, as the embedded engine runs it
    yield engine
    engine.dispose()


class World:
    """A project with a root agent and its subagents, each with an iteration, on one database."""

    def __init__(self, db: Engine) -> None:
        self.db = db
        self.project = new_id()
        self.bank = f"project:{self.project}"
        self.agents: dict[str, str] = {}
        self.iterations: dict[tuple[str, int], str] = {}
        with Session(db) as session, session.begin():
            session.add(Project(id=self.project, name="p", prompt="x", config={}, created_at=utcnow()))
        self.agent("root")

    def agent(self, name: str, parent: str | None = None, *, parallel: bool = False) -> str:
        agent_id = new_id()
        with Session(self.db) as session, session.begin():
            session.add(
                Agent(
                    id=agent_id,
                    project_id=self.project,
                    parent_id=self.agents.get(parent or ""),
                    depth=0 if parent is None else 1,
                    category="builder" if parent is None else "searcher",
                    parallel=parallel,
                    created_at=utcnow(),
                )
            )
        self.agents[name] = agent_id
        self.iteration(name, 1)
        return agent_id

    def iteration(self, name: str, number: int) -> str:
        iteration_id = new_id()
        with Session(self.db) as session, session.begin():
            session.add(
                Iteration(id=iteration_id, project_id=self.project, agent_id=self.agents[name], number=number)
            )
        self.iterations[(name, number)] = iteration_id
        return iteration_id

    def call(self, name: str, use_id: str, number: int = 1) -> memory.ToolCall:
        return memory.ToolCall(self.project, self.agents[name], self.iterations[(name, number)], use_id)

    def write(
        self,
        name: str,
        use_id: str,
        key: str,
        value: str,
        tags: list[str] | None = None,
        number: int = 1,
        limits: MemoryConfig = LIMITS,
    ) -> memory.Written:
        with Session(self.db) as session, session.begin():
            return memory.write(
                session, self.bank, key, value, tags or [], self.call(name, use_id, number), limits
            )

    def read(self, name: str, key: str, number: int = 1) -> memory.MemoryEntryOut | None:
        with Session(self.db) as session, session.begin():
            return memory.read(session, self.bank, key, self.call(name, "read", number))

    def count(self, model: type[MemoryVersion | AgentMessage | Event], **where: str) -> int:
        with Session(self.db) as session:
            query = select(func.count()).select_from(model).where(model.project_id == self.project)
            for column, value in where.items():
                query = query.where(getattr(model, column) == value)
            return int(session.scalar(query) or 0)


@pytest.fixture
def world(db: Engine) -> World:
    return World(db)


def test_two_writers_that_did_not_see_each_other_leave_a_conflict_a_reader_resolves(world: World) -> None:
    # Given: two parallel subagents write one key, neither having read the other's value
    world.agent("a", "root", parallel=True)
    world.agent("b", "root", parallel=True)
    first = world.write("a", "t1", "plan", "use sqlite")
    second = world.write("b", "t2", "plan", "use postgres")

    # Then: the second write kept the first value and says so
    assert (first.conflict, second.conflict) == (False, True)
    assert [v.value for v in second.others] == ["use sqlite"]

    # When: the parent reads the key in its next iteration, it sees both values with their writers
    world.iteration("root", 2)
    entry = world.read("root", "plan", number=2)
    assert entry is not None
    assert entry.conflict
    assert [(v.value, v.agent_id, v.iteration) for v in entry.values] == [
        ("use sqlite", world.agents["a"], 1),
        ("use postgres", world.agents["b"], 1),
    ]

    # And its write, having seen both, resolves the conflict
    resolved = world.write("root", "t3", "plan", "use postgres; sqlite embedded", number=2)
    assert (resolved.conflict, resolved.version) == (False, 3)
    after = world.read("root", "plan", number=2)
    assert after is not None
    assert (after.conflict, [v.value for v in after.values]) == (False, ["use postgres; sqlite embedded"])


def test_a_write_after_reading_the_latest_value_and_an_agents_own_rewrites_never_conflict(
    world: World,
) -> None:
    world.agent("a", "root")
    world.write("a", "t1", "notes", "one")
    world.write("a", "t2", "notes", "two")  # its own earlier write: seen
    world.read("root", "notes")
    replaced = world.write("root", "t3", "notes", "three")
    assert not replaced.conflict
    entry = world.read("root", "notes")
    assert entry is not None
    assert [v.value for v in entry.values] == ["three"]


def test_a_write_that_did_not_see_the_latest_version_keeps_both(world: World) -> None:
    world.agent("a", "root")
    world.write("root", "t1", "k", "v1")
    world.read("a", "k")
    world.write("root", "t2", "k", "v2")  # written after a read it
    late = world.write("a", "t3", "k", "a's v2")
    assert late.conflict
    assert [v.value for v in late.others] == ["v2"]


def test_full_text_search_ranks_the_matching_entry_first(world: World) -> None:
    world.write(
        "root", "t1", "database", "The service keeps its state in Postgres; the embedded engine in SQLite."
    )
    world.write("root", "t2", "frontend", "The dashboard uses htmx and uPlot.", ["ui"])
    world.write("root", "t3", "ops", "Postgres backups run nightly; restore with pg_restore.", ["ops"])
    with Session(world.db) as session:
        found = memory.search(session, world.bank, "postgres embedded engine")
        assert [e.key for e in found] == ["database"]
        found = memory.search(session, world.bank, "postgres")
        assert {e.key for e in found} == {"database", "ops"}
        assert all(e.rank is not None and e.rank > 0 for e in found)
        assert [e.key for e in memory.search(session, world.bank, "postgres", ["ops"])] == ["ops"]
        assert memory.search(session, world.bank, "kubernetes") == []
        assert [e.key for e in memory.search(session, world.bank, "postgres -nightly")] == ["database"]


def test_a_superseded_value_is_no_longer_found(world: World) -> None:
    world.write("root", "t1", "k", "alpha")
    world.write("root", "t2", "k", "beta")
    with Session(world.db) as session:
        assert memory.search(session, world.bank, "alpha") == []
        assert [e.key for e in memory.search(session, world.bank, "beta")] == ["k"]


def test_limits_refuse_and_store_nothing(world: World) -> None:
    small = MemoryConfig(max_entry_bytes=10, max_entries=2)
    with pytest.raises(InvalidInput, match="the value is 11 bytes; this project's limit is 10"):
        world.write("root", "t1", "k", "x" * 11, limits=small)
    world.write("root", "t2", "a", "1", limits=small)
    world.write("root", "t3", "b", "2", limits=small)
    with pytest.raises(InvalidInput, match=r"the memory bank is full \(2 keys"):
        world.write("root", "t4", "c", "3", limits=small)
    world.write("root", "t5", "a", "overwrite", limits=small)  # an existing key still takes a write
    assert world.count(MemoryVersion) == 3
    with Session(world.db) as session:
        assert memory.size(session, world.bank, shared=False).entries == 2
        assert memory.size(session, world.bank, shared=False).size_bytes == len("overwrite") + 1


def test_the_count_limit_holds_with_writers_at_once(world: World) -> None:
    # Given: eight agents writing eight new keys at the same moment into a bank of four
    names = [f"w{i}" for i in range(8)]
    for name in names:
        world.agent(name, "root", parallel=True)
    limits = MemoryConfig(max_entries=4)
    start = threading.Barrier(len(names))

    def attempt(name: str) -> bool:
        start.wait()
        try:
            world.write(name, "t", f"key-{name}", "v", limits=limits)
        except InvalidInput:
            return False
        return True

    with ThreadPoolExecutor(len(names)) as pool:
        outcomes = list(pool.map(attempt, names))

    # Then: exactly four were written, and the bank counts four
    assert outcomes.count(True) == 4
    assert world.count(MemoryVersion) == 4
    with Session(world.db) as session:
        assert memory.size(session, world.bank, shared=False).entries == 4


def test_a_repeated_tool_call_writes_and_sends_nothing_twice(world: World) -> None:
    world.agent("a", "root")
    first = world.write("root", "toolu_1", "k", "v")
    again = world.write("root", "toolu_1", "k", "v")
    assert (again.repeated, again.version, again.event) == (True, first.version, None)
    with Session(world.db) as session, session.begin():
        sent = mailbox.send(session, world.call("root", "toolu_2"), world.agents["a"], "hello")
    with Session(world.db) as session, session.begin():
        repeated = mailbox.send(session, world.call("root", "toolu_2"), world.agents["a"], "hello")
    assert (sent.repeated, repeated.repeated, repeated.recipients) == (False, True, [world.agents["a"]])
    assert world.count(MemoryVersion) == 1
    assert world.count(AgentMessage) == 1
    assert world.count(Event, type="memory_written") == 1
    assert world.count(Event, type="message_sent") == 1


def _send(world: World, name: str, use_id: str, to: str, text: str) -> mailbox.Sent:
    with Session(world.db) as session, session.begin():
        return mailbox.send(session, world.call(name, use_id), to, text)


def _deliver(world: World, name: str, number: int) -> list[str]:
    with Session(world.db) as session, session.begin():
        return [
            m.text for m in mailbox.deliver(session, world.agents[name], world.iterations[(name, number)])
        ]


def test_messages_reach_the_recipients_next_iteration_once_in_order(world: World) -> None:
    world.agent("a", "root")
    world.agent("b", "root")
    _send(world, "a", "t1", world.agents["b"], "first")
    _send(world, "a", "t2", world.agents["b"], "second")
    _send(world, "b", "t3", "parent", "to the parent")
    _send(world, "root", "t4", "broadcast", "to all")

    world.iteration("b", 2)
    assert _deliver(world, "b", 2) == ["first", "second", "to all"]
    assert _deliver(world, "b", 2) == ["first", "second", "to all"]  # another attempt of it: the same
    world.iteration("b", 3)
    assert _deliver(world, "b", 3) == []
    world.iteration("root", 2)
    assert _deliver(world, "root", 2) == ["to the parent"]


@pytest.mark.parametrize(
    ("to", "message"),
    [
        ("nobody", "unknown recipient 'nobody': send to parent, broadcast, or an agent of this project"),
        ("parent", "you have no parent agent"),
        ("self", "you cannot send a message to yourself"),
        ("done", "will not run again"),
        ("busy", "will not run again"),
    ],
)
def test_a_recipient_that_cannot_read_it_fails_the_send_and_nothing_is_sent(
    world: World, to: str, message: str
) -> None:
    done = world.agent("done", "root")
    busy = world.agent("busy", "root", parallel=True)
    with Session(world.db) as session, session.begin():
        session.get_one(Agent, done).status = AgentStatus.COMPLETED
        session.get_one(Agent, busy).status = AgentStatus.WORKING  # its one iteration is under way
    target = {"self": world.agents["root"], "done": done, "busy": busy}.get(to, to)
    with pytest.raises(InvalidInput, match=message):
        _send(world, "root", "t1", target, "hello")
    assert world.count(AgentMessage) == 0
    assert world.count(Event, type="message_sent") == 0


def test_nothing_is_sent_once_the_project_has_ended(world: World) -> None:
    world.agent("a", "root")
    with Session(world.db) as session, session.begin():
        session.get_one(Project, world.project).status = ProjectStatus.COMPLETED
    with pytest.raises(InvalidInput, match="the project has ended"):
        _send(world, "root", "t1", "broadcast", "hello")
    assert world.count(AgentMessage) == 0
