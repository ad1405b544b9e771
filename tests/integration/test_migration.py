"""The migrations build exactly the schema the models describe, on Postgres and SQLite.

Queries are written against the models and tuned against their indexes (the partial index
``ix_iterations_unfinished`` above all); a migration that drifted from them would leave a
deployed database without what the scheduler relies on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from shared.migrate import alembic_config, upgrade
from shared.models import Base

pytestmark = pytest.mark.integration


def _drift(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))
    finally:
        engine.dispose()


def _unfinished_index(url: str) -> dict[str, object]:
    engine = create_engine(url)
    try:
        indexes = {ix["name"]: ix for ix in inspect(engine).get_indexes("iterations")}
    finally:
        engine.dispose()
    return dict(indexes["ix_iterations_unfinished"])


def test_the_migrated_postgres_database_matches_the_models(database_url: str) -> None:
    assert _drift(database_url) == []
    index = _unfinished_index(database_url)
    assert index["column_names"] == ["project_id"]
    where = str(index["dialect_options"]["postgresql_where"])  # type: ignore[index]
    assert "'queued'" in where
    assert "'running'" in where


def test_the_migrated_sqlite_database_matches_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'raas.db'}"
    upgrade(url)
    assert _drift(url) == []
    assert _unfinished_index(url)["column_names"] == ["project_id"]


def _paused_project(url: str, reason: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO projects (id, name, prompt, config, status, status_reason, last_event_seq,"
                    " budget_limit_usd, spent_usd, reserved_usd, budget_warned, created_at)"
                    " VALUES ('p1', 'p', 'Do it.', '{}', 'paused', :reason, 0, 1, 1, 0, false, '2026-11-24')"
                ),
                {"reason": reason},
            )
    finally:
        engine.dispose()


def test_a_paused_projects_reason_moves_into_its_column_and_back(tmp_path: Path) -> None:
    # Given a project paused before the reason had a column of its own
    url = f"sqlite:///{tmp_path / 'raas.db'}"
    upgrade(url, "0001")
    _paused_project(url, "budget_exceeded: spent $1.0000 of $1.00")

    # When the database is upgraded, the reason is a column and the words stay
    upgrade(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT pause_reason, status_reason FROM projects")).one()
        assert tuple(row) == ("budget_exceeded", "spent $1.0000 of $1.00")
    finally:
        engine.dispose()

    # And a downgrade writes them back as they were
    command.downgrade(alembic_config(url), "0001")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            reason = conn.execute(text("SELECT status_reason FROM projects")).scalar_one()
        assert reason == "budget_exceeded: spent $1.0000 of $1.00"
    finally:
        engine.dispose()
