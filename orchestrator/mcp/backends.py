"""What the MCP tools call: one small interface, two implementations, one per transport.

Why two: the stdio server (``raas mcp``) runs on the user's machine and reaches the coordinator
the way the CLI does, over its HTTP API with RAAS_API_TOKEN (:class:`HttpBackend`); the HTTP
endpoint is mounted on the coordinator itself, so its tools call the core in-process, on behalf
of the caller its token names (:class:`CoreBackend`). The tools (``orchestrator.mcp.tools``) are
written once against :class:`Backend` and never know which one they have.

Neither implementation imports the edges above this package: the HTTP client comes in as any
object with :class:`HttpApi`'s methods (``orchestrator.cli.client.ApiClient``),
and the tenant rules as two callables (``orchestrator.api.tenants``), so the layers stay
``cli > api > mcp > queries > scheduling``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote

from orchestrator.notify import subscriptions
from orchestrator.notify.subscriptions import SubscriptionOut
from orchestrator.queries import costs, memory, projects
from orchestrator.queries.costs import CostReport
from orchestrator.queries.follow import follow
from orchestrator.scheduling import decisions, lifecycle, submission, talk
from orchestrator.scheduling.approvals import ApprovalOut
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.talk import SaidOut
from orchestrator.triggers import store
from orchestrator.workspaces import get_store
from shared import events
from shared.db import session_scope
from shared.events import EventBus
from shared.models import TriggerStatus
from shared.schemas import EventOut, MemoryEntryOut, ProjectDetail, ProjectOut
from shared.settings import Settings
from shared.triggers import TriggerOut, TriggerRunOut

Action = Literal["pause", "resume", "stop"]
TriggerAction = Literal["pause", "resume"]
#: The trigger's latest runs a look at one trigger shows.
TRIGGER_RUNS = 10


class Backend(Protocol):
    """What a tool may ask of a coordinator; every method raises the ``shared.errors`` tree."""

    @property
    def reads_local_directories(self) -> bool:
        """Whether a project may come from a directory on this process's machine (stdio only)."""
        ...

    def submit(self, archive: bytes, name: str) -> ProjectOut:
        """Create a project from a gzipped tar (PROMPT.md at its top) and start it."""
        ...

    def project(self, project_id: str) -> ProjectOut: ...

    def status(self, project_id: str) -> ProjectDetail: ...

    def history(self, project_id: str, after_seq: int, limit: int) -> list[EventOut]:
        """At most ``limit`` events after ``after_seq``, as they are now (no waiting)."""
        ...

    def wait_event(self, project_id: str, after_seq: int, wait_s: float) -> EventOut | None:
        """The next event after ``after_seq``, waiting at most about ``wait_s`` for it."""
        ...

    def control(self, project_id: str, action: Action) -> ProjectOut: ...

    def cost(self, project_id: str) -> CostReport: ...

    def decide(self, project_id: str, reject: bool, comment: str | None) -> ApprovalOut: ...

    def say(self, project_id: str, text: str, agent: str | None, now: bool) -> SaidOut: ...

    def search_memory(self, project_id: str, query: str, limit: int) -> list[MemoryEntryOut]:
        """The keys of the project's memory bank matching ``query``, best first."""
        ...

    def triggers(self) -> list[TriggerOut]: ...

    def trigger(self, ref: str) -> tuple[TriggerOut, list[TriggerRunOut]]:
        """One trigger (by id or name) and its latest runs."""
        ...

    def control_trigger(self, ref: str, action: TriggerAction) -> TriggerOut: ...

    def notifications(self) -> list[SubscriptionOut]:
        """The caller's notification subscriptions, with their state."""
        ...


class HttpApi(Protocol):
    """The part of the CLI's HTTP client (``orchestrator.cli.client.ApiClient``) used here."""

    def create_project(self, archive: bytes, name: str) -> dict[str, Any]: ...

    def start_project(self, project_id: str) -> dict[str, Any]: ...

    def project(self, project_id: str) -> dict[str, Any]: ...

    def events(
        self, project_id: str, after: int = 0, follow: bool = True, idle_timeout_s: float | None = None
    ) -> Iterator[EventOut]: ...

    def action(self, project_id: str, verb: str) -> dict[str, Any]: ...

    def approve(self, project_id: str, reject: bool, comment: str | None) -> dict[str, Any]: ...

    def cost(self, project_id: str, iterations: bool) -> dict[str, Any]: ...

    def memory(
        self, project_id: str, search: str | None = None, tags: Sequence[str] = (), limit: int | None = None
    ) -> list[dict[str, Any]]: ...

    def request(self, method: str, path: str, **kwargs: Any) -> Any: ...


def _take(stream: Iterator[EventOut], limit: int) -> list[EventOut]:
    """At most ``limit`` events, then the stream is closed (its connection, its subscription)."""
    try:
        return list(islice(stream, limit))
    finally:
        if isinstance(stream, Generator):
            stream.close()


class HttpBackend:
    """The coordinator's HTTP API, as the CLI calls it: for ``raas mcp`` on the user's machine."""

    reads_local_directories = True

    def __init__(self, client: HttpApi) -> None:
        self._client = client

    def submit(self, archive: bytes, name: str) -> ProjectOut:
        created = self._client.create_project(archive, name)
        return ProjectOut.model_validate(self._client.start_project(created["id"]))

    def project(self, project_id: str) -> ProjectOut:
        return ProjectOut.model_validate(self._client.project(project_id))

    def status(self, project_id: str) -> ProjectDetail:
        return ProjectDetail.model_validate(self._client.project(project_id))

    def history(self, project_id: str, after_seq: int, limit: int) -> list[EventOut]:
        return _take(self._client.events(project_id, after_seq, follow=False), limit)

    def wait_event(self, project_id: str, after_seq: int, wait_s: float) -> EventOut | None:
        found = _take(self._client.events(project_id, after_seq, follow=True, idle_timeout_s=wait_s), 1)
        return found[0] if found else None

    def control(self, project_id: str, action: Action) -> ProjectOut:
        return ProjectOut.model_validate(self._client.action(project_id, action))

    def cost(self, project_id: str) -> CostReport:
        return CostReport.model_validate(self._client.cost(project_id, False))

    def decide(self, project_id: str, reject: bool, comment: str | None) -> ApprovalOut:
        return ApprovalOut.model_validate(self._client.approve(project_id, reject, comment))

    def say(self, project_id: str, text: str, agent: str | None, now: bool) -> SaidOut:
        body = {"text": text, "agent": agent, "now": now}
        said = self._client.request("POST", f"/v1/projects/{project_id}/say", json=body)
        return SaidOut.model_validate(said)

    def search_memory(self, project_id: str, query: str, limit: int) -> list[MemoryEntryOut]:
        found = self._client.memory(project_id, search=query, limit=limit)
        return [MemoryEntryOut.model_validate(entry) for entry in found]

    def triggers(self) -> list[TriggerOut]:
        return [TriggerOut.model_validate(row) for row in self._client.request("GET", "/v1/triggers")]

    def trigger(self, ref: str) -> tuple[TriggerOut, list[TriggerRunOut]]:
        path = f"/v1/triggers/{quote(ref, safe='')}"
        found = TriggerOut.model_validate(self._client.request("GET", path))
        runs = self._client.request("GET", f"{path}/runs", params={"limit": TRIGGER_RUNS})
        return found, [TriggerRunOut.model_validate(run) for run in runs]

    def control_trigger(self, ref: str, action: TriggerAction) -> TriggerOut:
        path = f"/v1/triggers/{quote(ref, safe='')}/{action}"
        return TriggerOut.model_validate(self._client.request("POST", path))

    def notifications(self) -> list[SubscriptionOut]:
        return [
            SubscriptionOut.model_validate(row) for row in self._client.request("GET", "/v1/notifications")
        ]


@dataclass(frozen=True)
class CoreBackend:
    """The core, in-process, as one caller: for the /mcp endpoint mounted on the coordinator.

    ``authorize(project_id)`` refuses a project the caller may not see (with the answer an
    unknown id gets) and ``admit_submission()`` enforces the caller's submission rate: the
    API's own tenant rules, handed in by the endpoint that authenticated the caller.
    """

    settings: Settings
    dispatcher: Dispatcher
    bus: EventBus
    tenant_id: str | None
    authorize: Callable[[str], None]
    admit_submission: Callable[[], None]
    caller: str = "operator"  # who decides an approval: Principal.name
    reads_local_directories = False

    def _visible(self, project_id: str) -> ProjectOut:
        self.authorize(project_id)
        return projects.get_project(project_id)  # NotFound for an id nobody has

    def submit(self, archive: bytes, name: str) -> ProjectOut:
        self.admit_submission()
        with tempfile.TemporaryDirectory(prefix="raas-mcp-") as tmp:
            upload = Path(tmp) / "upload.tar.gz"
            upload.write_bytes(archive)
            created = submission.create_project(
                get_store(self.settings),
                upload,
                name,
                self.bus,
                tenant_id=self.tenant_id,
                network_allowed=self.settings.sandbox_network_allowed,
            )
        return submission.start_project(created.id, self.dispatcher, self.bus)

    def project(self, project_id: str) -> ProjectOut:
        return self._visible(project_id)

    def status(self, project_id: str) -> ProjectDetail:
        self.authorize(project_id)
        return projects.project_detail(project_id)

    def history(self, project_id: str, after_seq: int, limit: int) -> list[EventOut]:
        self._visible(project_id)
        with session_scope() as session:
            return events.history(session, project_id, after_seq, limit=limit)

    def wait_event(self, project_id: str, after_seq: int, wait_s: float) -> EventOut | None:
        self._visible(project_id)
        found = _take(follow(self.settings.redis_url, project_id, after_seq, idle_timeout_s=wait_s), 1)
        return found[0] if found else None

    def control(self, project_id: str, action: Action) -> ProjectOut:
        self.authorize(project_id)
        verbs = {
            "pause": lifecycle.pause_project,
            "resume": lifecycle.resume_project,
            "stop": lifecycle.stop_project,
        }
        return verbs[action](project_id, self.dispatcher, self.bus)

    def cost(self, project_id: str) -> CostReport:
        self.authorize(project_id)
        return costs.cost_report(project_id)

    def decide(self, project_id: str, reject: bool, comment: str | None) -> ApprovalOut:
        self.authorize(project_id)
        return decisions.decide(
            project_id,
            approve=not reject,
            comment=comment,
            by=self.caller,
            dispatcher=self.dispatcher,
            bus=self.bus,
        )

    def say(self, project_id: str, text: str, agent: str | None, now: bool) -> SaidOut:
        self.authorize(project_id)
        return talk.say_to(
            project_id,
            text,
            author=self.caller,
            agent_id=agent,
            now=now,
            dispatcher=self.dispatcher,
            bus=self.bus,
        )

    def search_memory(self, project_id: str, query: str, limit: int) -> list[MemoryEntryOut]:
        self.authorize(project_id)
        return memory.search_memory(project_id, query, limit=limit)

    def triggers(self) -> list[TriggerOut]:
        return store.list_triggers(self.tenant_id, self.settings)

    def trigger(self, ref: str) -> tuple[TriggerOut, list[TriggerRunOut]]:
        found = store.show_trigger(self.tenant_id, ref, self.settings)
        return found, store.trigger_runs(self.tenant_id, ref, TRIGGER_RUNS)

    def control_trigger(self, ref: str, action: TriggerAction) -> TriggerOut:
        status = TriggerStatus.PAUSED if action == "pause" else TriggerStatus.ACTIVE
        return store.set_status(self.tenant_id, ref, status)

    def notifications(self) -> list[SubscriptionOut]:
        with session_scope() as session:
            return subscriptions.listing(session, self.tenant_id)
