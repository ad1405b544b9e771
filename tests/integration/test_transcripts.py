"""Transcripts of real runs: a project driven through the real coordinator, worker code,
sandbox and scripted model, then read back through the API as a transcript and a workspace tar.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.client import ApiClient
from orchestrator.transcripts.files import read_transcript
from orchestrator.transcripts.model import Transcript
from orchestrator.transcripts.scg import parse, sizes, write
from shared.db import session_scope
from shared.errors import NotFound, RaasError
from shared.models import Message, Project
from tests.support.engine import Engine, engine
from tests.support.records import text, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]

NOTE = "naïve | piped \\ back-slashed\nsecond line 🚀\n"
SCRIPT = {
    "responses": [
        {
            "content": [
                {"type": "text", "text": "Writing the note."},
                {"type": "tool_use", "name": "write", "input": {"path": "note.txt", "content": NOTE}},
            ],
            "usage": {"input_tokens": 1000, "output_tokens": 50, "cache_creation_input_tokens": 700},
        },
        tool("read", {"path": "missing.txt"}),
        tool("spawn_subagent", {"category": "searcher", "prompt": "find | the config"}),
        text("Spawned; ending my turn."),
        text("CHILD REPORT: the config lives in settings.ini"),
        tool("task_complete", {"summary": "note written"}),
    ]
}


@pytest.fixture(scope="module")
def finished(
    services: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, str]]:
    with engine(SCRIPT, tmp_path_factory.mktemp("transcripts")) as eng:
        project_id = eng.submit()
        eng.run_to_end(project_id)
        yield eng, project_id


@pytest.fixture(scope="module")
def client(finished: tuple[Engine, str]) -> Iterator[ApiClient]:
    eng, _ = finished
    api = ApiClient(eng.settings.coordinator_url, eng.settings.api_token.get_secret_value())
    yield api
    api.close()


def test_transcript_holds_every_message_the_agent_tree_the_reports_and_the_totals(
    finished: tuple[Engine, str], client: ApiClient
) -> None:
    _, project_id = finished
    transcript = Transcript.model_validate(client.transcript(project_id))
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        stored = session.scalar(select(func.count()).where(Message.project_id == project_id)) or 0

    assert transcript.project.status.value == "completed"
    assert [m.seq for m in transcript.messages] == list(range(1, stored + 1))
    root, child = transcript.agents
    assert (root.depth, root.parent, root.iterations) == (0, None, 2)
    assert (child.category, child.depth, child.parent, child.iterations) == ("searcher", 1, root.id, 1)
    (sub,) = transcript.subagents
    assert (sub.agent, sub.iteration, sub.prompt) == (child.id, 1, "find | the config")
    assert "CHILD REPORT" in (sub.report or "")

    first_call = transcript.messages[1]
    assert first_call.role == "assistant"
    assert first_call.usage is not None
    assert first_call.usage.cache_creation_input_tokens == 700
    assert first_call.content[1].input["content"] == NOTE  # type: ignore[union-attr]
    metrics = transcript.metrics
    assert metrics.cost_usd == project.spent_usd > 0
    assert metrics.iterations == 3
    assert metrics.tool_calls == 4  # write, read, spawn_subagent, task_complete
    assert metrics.tool_errors >= 1  # reading a file that is not there
    assert metrics.input_tokens >= 1000
    assert metrics.duration_s is not None
    assert metrics.duration_s > 0


def test_a_real_transcript_written_as_scg_reads_back_identical(
    finished: tuple[Engine, str], client: ApiClient, tmp_path: Path
) -> None:
    _, project_id = finished
    transcript = Transcript.model_validate(client.transcript(project_id))
    path = tmp_path / "run.scg"
    path.write_text(write(transcript), encoding="utf-8")
    assert read_transcript(path) == transcript
    assert parse(write(transcript)).model_dump(mode="json") == transcript.model_dump(mode="json")
    size = sizes(transcript)
    assert size["scg"] * 2 < size["json"]


def test_an_agents_transcript_is_its_own_conversation(
    finished: tuple[Engine, str], client: ApiClient
) -> None:
    _, project_id = finished
    whole = Transcript.model_validate(client.transcript(project_id))
    child_id = whole.agents[1].id
    child = Transcript.model_validate(client.transcript(project_id, child_id[:6]))
    assert {m.agent for m in child.messages} == {child_id}
    assert [a.id for a in child.agents] == [child_id]
    root = Transcript.model_validate(client.transcript(project_id, "root"))
    assert len(root.messages) + len(child.messages) == len(whole.messages)
    assert len(root.agents) == 2
    with pytest.raises(NotFound, match="is not an agent"):
        client.transcript(project_id, "zzzz")
    with pytest.raises(NotFound):
        client.transcript("0000000000000000")


def _tar_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_workspace_tar_holds_the_final_files(
    finished: tuple[Engine, str], client: ApiClient, tmp_path: Path
) -> None:
    _, project_id = finished
    archive = tmp_path / "ws.tar"
    client.download_workspace(project_id, archive)
    assert _tar_files(archive.read_bytes())["note.txt"] == NOTE.encode()
    with pytest.raises(NotFound):
        client.download_workspace("0000000000000000", tmp_path / "none.tar")


class _CutShort:
    """The coordinator's client, but the download stops inside the last file of the archive."""

    def __init__(self, real: ApiClient) -> None:
        self.real = real

    def download_workspace(self, project_id: str, dest: Path) -> None:
        self.real.download_workspace(project_id, dest)
        with tarfile.open(dest) as tar:
            last = [m for m in tar.getmembers() if m.isfile()][-1]
        data = dest.read_bytes()
        dest.write_bytes(data[: last.offset_data + last.size // 2])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_pull_that_fails_midway_leaves_nothing(
    finished: tuple[Engine, str], client: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, project_id = finished
    monkeypatch.setattr("orchestrator.cli.transcripts.api", lambda: _CutShort(client))
    result = CliRunner().invoke(app, ["pull", project_id, str(tmp_path / "out")])
    assert isinstance(result.exception, RaasError), result.output
    assert "nothing was written" in str(result.exception)
    assert list(tmp_path.iterdir()) == []

    # And with the whole archive the same pull puts the files in place
    monkeypatch.setattr("orchestrator.cli.transcripts.api", lambda: client)
    result = CliRunner().invoke(app, ["pull", project_id, str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "note.txt").read_text(encoding="utf-8") == NOTE
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
