"""The memory bank and messages between agents

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 03:00:00

``memory_banks`` (a project's or a tenant's bank: the row every write locks, its key count and
size), ``memory_entries`` (one per key, flagged while in conflict), ``memory_versions`` (every
write with its writer and version vector; ``current`` marks the key's current values) and
``memory_views`` (what an agent read of a key in an iteration); ``agent_messages`` (one row per
recipient, ``delivered_to`` the recipient's iteration that read it; a partial index holds the
undelivered ones).

The full-text index is not in the models, it depends on the dialect: on Postgres a GIN index over
``to_tsvector('english', key || ' ' || value)`` (shared.memory searches with exactly that
expression), on SQLite the FTS5 table ``memory_fts`` over the versions' key and value, kept in
step by triggers (a later batch alteration of memory_versions on SQLite copies the table: it must
make the triggers again). tests/integration/test_migration.py leaves these out of its comparison.
Batch mode, so that SQLite (the embedded engine) can alter its tables too.
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

UNDELIVERED = sa.text('delivered_to IS NULL')

POSTGRES_FTS = (
    "CREATE INDEX ix_memory_versions_fts ON memory_versions"
    " USING gin (to_tsvector('english', key || ' ' || value))",
)
# External content: the text lives in memory_versions once; the triggers keep the index in step.
SQLITE_FTS = (
    "CREATE VIRTUAL TABLE memory_fts USING fts5(key, value, content='memory_versions',"
    " content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_versions BEGIN"
    " INSERT INTO memory_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_versions BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value); END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF key, value ON memory_versions BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value);"
    " INSERT INTO memory_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
)


def upgrade() -> None:
    op.create_table('memory_banks',
    sa.Column('id', sa.String(length=48), nullable=False),
    sa.Column('entries', sa.Integer(), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('memory_entries',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('bank_id', sa.String(length=48), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('conflict', sa.Boolean(), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['bank_id'], ['memory_banks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('bank_id', 'key')
    )
    op.create_table('agent_messages',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('sender_id', sa.String(length=32), nullable=False),
    sa.Column('iteration_id', sa.String(length=32), nullable=False),
    sa.Column('tool_use_id', sa.String(length=100), nullable=False),
    sa.Column('recipient_id', sa.String(length=32), nullable=False),
    sa.Column('broadcast', sa.Boolean(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('delivered_to', sa.String(length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['delivered_to'], ['iterations.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['iteration_id'], ['iterations.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['recipient_id'], ['agents.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['sender_id'], ['agents.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('iteration_id', 'tool_use_id', 'recipient_id')
    )
    with op.batch_alter_table('agent_messages', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_agent_messages_delivered_to'), ['delivered_to'], unique=False)
        batch_op.create_index(batch_op.f('ix_agent_messages_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_agent_messages_undelivered', ['recipient_id'], unique=False, postgresql_where=UNDELIVERED, sqlite_where=UNDELIVERED)

    op.create_table('memory_versions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('entry_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('vector', sa.JSON(), nullable=False),
    sa.Column('current', sa.Boolean(), nullable=False),
    sa.Column('conflict', sa.Boolean(), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('agent_id', sa.String(length=32), nullable=False),
    sa.Column('iteration_id', sa.String(length=32), nullable=False),
    sa.Column('tool_use_id', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['entry_id'], ['memory_entries.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['iteration_id'], ['iterations.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('entry_id', 'version'),
    sa.UniqueConstraint('iteration_id', 'tool_use_id')
    )
    with op.batch_alter_table('memory_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_memory_versions_project_id'), ['project_id'], unique=False)

    op.create_table('memory_views',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('entry_id', sa.Integer(), nullable=False),
    sa.Column('agent_id', sa.String(length=32), nullable=False),
    sa.Column('iteration_id', sa.String(length=32), nullable=False),
    sa.Column('vector', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['entry_id'], ['memory_entries.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['iteration_id'], ['iterations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('entry_id', 'agent_id', 'iteration_id')
    )
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_FTS if dialect == 'postgresql' else SQLITE_FTS if dialect == 'sqlite' else ():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        for trigger in ('memory_fts_update', 'memory_fts_delete', 'memory_fts_insert'):
            op.execute(f'DROP TRIGGER IF EXISTS {trigger}')
        op.execute('DROP TABLE IF EXISTS memory_fts')
    else:
        op.execute('DROP INDEX IF EXISTS ix_memory_versions_fts')
    op.drop_table('memory_views')
    with op.batch_alter_table('memory_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_memory_versions_project_id'))

    op.drop_table('memory_versions')
    with op.batch_alter_table('agent_messages', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_messages_undelivered', postgresql_where=UNDELIVERED, sqlite_where=UNDELIVERED)
        batch_op.drop_index(batch_op.f('ix_agent_messages_project_id'))
        batch_op.drop_index(batch_op.f('ix_agent_messages_delivered_to'))

    op.drop_table('agent_messages')
    op.drop_table('memory_entries')
    op.drop_table('memory_banks')
