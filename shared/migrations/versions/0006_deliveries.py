"""Deliveries: a project's branches and pull request on its remote, as outbox rows

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 04:40:00

``deliveries``: one row per project and key ("project", or "task:<task id>"), written in the
transaction that decides the delivery; its steps (the push, the pull request, the round's
comment) are remembered so a retried delivery repeats none (orchestrator.delivery).
"""

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_table('deliveries',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('key', sa.String(length=120), nullable=False),
    sa.Column('kind', sa.Enum('task', 'project', name='deliverykind', native_enum=False, length=16), nullable=False),
    sa.Column('task_key', sa.String(length=100), nullable=True),
    sa.Column('status', sa.Enum('pending', 'delivered', 'failed', name='deliverystatus', native_enum=False, length=16), nullable=False),
    sa.Column('remote', sa.String(length=2000), nullable=False),
    sa.Column('branch', sa.String(length=255), nullable=False),
    sa.Column('base', sa.String(length=255), nullable=True),
    sa.Column('round', sa.Integer(), nullable=False),
    sa.Column('sha', sa.String(length=64), nullable=True),
    sa.Column('pushed_sha', sa.String(length=64), nullable=True),
    sa.Column('ending', sa.String(length=20), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('pull_request_number', sa.Integer(), nullable=True),
    sa.Column('pull_request_url', sa.String(length=2000), nullable=True),
    sa.Column('noted_round', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('enqueued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_id', 'key')
    )
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_deliveries_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_deliveries_pending', ['id'], unique=False, postgresql_where=PENDING, sqlite_where=PENDING)


def downgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_pending', postgresql_where=PENDING, sqlite_where=PENDING)
        batch_op.drop_index(batch_op.f('ix_deliveries_project_id'))

    op.drop_table('deliveries')
