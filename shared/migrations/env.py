"""Alembic environment: the URL comes from the caller's config or RAAS_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from shared.models import Base
from shared.settings import get_settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().database_url

# render_as_batch lets the same migrations alter tables on SQLite.
if context.is_offline_mode():
    context.configure(url=url, target_metadata=Base.metadata, render_as_batch=True, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # Coordinator replicas starting together migrate one at a time: the next waits
                # here, then finds the schema at the head already (released at the commit).
                connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('raas-migrate'))"))
            context.run_migrations()
    engine.dispose()
