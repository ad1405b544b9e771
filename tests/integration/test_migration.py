"""The one migration builds exactly the schema the models describe, on Postgres and SQLite.

Queries are written against the models and tuned against their indexes (the partial index
``ix_iterations_unfinished`` above all); a migration that drifted from them would leave a
deployed database without what the scheduler relies on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from shared.migrate import upgrade
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
