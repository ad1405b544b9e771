"""Projects waiting for a worker; SCUD parent tasks as group nodes

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 02:10:00

``projects.waiting_for_worker_since`` is set by the coordinator's worker watch while a running
project's iterations wait and no live worker consumes their queue (partial index: the watch
reads only those rows). ``tasks.kind`` tells a SCUD parent task (``group``: no agent works it,
it completes with its last subtask) from the tasks agents work (``work``, every existing row).
Batch mode, so that SQLite (the embedded engine) can alter its tables too.
"""

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

WAITING = sa.text('waiting_for_worker_since IS NOT NULL')


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('waiting_for_worker_since', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_projects_waiting_for_worker', ['id'], unique=False, postgresql_where=WAITING, sqlite_where=WAITING)
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.Enum('work', 'group', name='taskkind', native_enum=False, length=16), nullable=False, server_default='work'))
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.alter_column('kind', server_default=None, existing_type=sa.Enum('work', 'group', name='taskkind', native_enum=False, length=16), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_column('kind')
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_index('ix_projects_waiting_for_worker', postgresql_where=WAITING, sqlite_where=WAITING)
        batch_op.drop_column('waiting_for_worker_since')
