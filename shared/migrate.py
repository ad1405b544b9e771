"""Running the Alembic migrations from code (``raas migrate``, embedded start-up, tests).

A database whose schema is newer than this code (a replica of an older release started after a
newer one migrated the database) is refused before anything touches it: the old code would
read and write tables it does not know the shape of.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from shared.errors import InvalidInput

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def check_not_newer(url: str) -> None:
    """Refuse a database migrated past what this code knows.

    Raises:
        InvalidInput: the database's revision is not one of this code's migrations (one line).
    """
    scripts = ScriptDirectory.from_config(alembic_config(url))
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_heads()
    finally:
        engine.dispose()
    known = {script.revision for script in scripts.walk_revisions()}
    unknown = sorted(set(current) - known)
    if unknown:
        msg = (
            f"the database's schema is at revision {', '.join(unknown)}, newer than this code "
            f"(which knows up to {scripts.get_current_head()}): run this release's newer version, "
            "or restore a database of this one"
        )
        raise InvalidInput(msg)


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``.

    Raises:
        InvalidInput: its schema is newer than this code (``check_not_newer``).
    """
    check_not_newer(url)
    command.upgrade(alembic_config(url), revision)
