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


def _not_full_text(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Everything but the memory bank's full-text index. It is not in the models since it depends
    on the dialect (migration 0004 makes it): Postgres's GIN expression index, SQLite's FTS5 table
    with the shadow tables FTS5 keeps beside it."""
    return not (name == "ix_memory_versions_fts" or (name or "").startswith("memory_fts"))


def _drift(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"include_object": _not_full_text})
            return list(compare_metadata(context, Base.metadata))
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


def test_the_full_text_index_is_made_for_each_dialect_and_undone(database_url: str, tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'raas.db'}"
    upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    try:
        assert "memory_fts" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    engine = create_engine(database_url)
    try:
        indexes = {ix["name"] for ix in inspect(engine).get_indexes("memory_versions")}
    finally:
        engine.dispose()
    assert "ix_memory_versions_fts" in indexes

    command.downgrade(alembic_config(sqlite_url), "0003")
    engine = create_engine(sqlite_url)
    try:
        tables = inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert not [name for name in tables if name.startswith("memory")]


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


def test_a_workspace_written_before_increments_is_a_base_and_a_downgrade_refuses_to_drop_any(
    tmp_path: Path,
) -> None:
    # Given a workspace whose row names one full bundle of its generation (before 0018)
    url = f"sqlite:///{tmp_path / 'raas.db'}"
    upgrade(url, "0017")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workspace_heads (project_id, generation, object_key, updated_at)"
                    " VALUES ('p1', 7, 'ws/p1/7.bundle', CURRENT_TIMESTAMP)"
                )
            )
        # When the database is upgraded, that bundle is the base of generation 7, with nothing after
        upgrade(url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT base_generation FROM workspace_heads")).scalar_one() == 7
            assert conn.execute(text("SELECT count(*) FROM workspace_increments")).scalar_one() == 0
        # And a downgrade refuses, naming why, while a workspace holds an increment
        with engine.begin() as conn:
            conn.execute(text("UPDATE workspace_heads SET generation = 8"))
        with pytest.raises(RuntimeError, match="1 workspace\\(s\\) hold increments"):
            command.downgrade(alembic_config(url), "0017")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT generation FROM workspace_heads")).scalar_one() == 8
    finally:
        engine.dispose()
