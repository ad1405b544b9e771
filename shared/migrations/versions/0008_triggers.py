"""Triggers (issue #24): triggers, their deliveries and schedule slots

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 14:45:00

``triggers``: a tenant's source, filter, template and limits (the webhook secret encrypted);
``trigger_runs``: one row per accepted delivery or schedule slot, unique on (trigger, key), the
receiver's outbox row and the link to the run's project (orchestrator.triggers).
"""

from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

SCHEDULED = sa.text("next_slot_at IS NOT NULL")
OPEN = sa.text("status IN ('received', 'queued', 'starting')")


def upgrade() -> None:
    op.create_table('triggers',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', sa.String(length=32), nullable=True),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('source', sa.Enum('github', 'gitlab', 'webhook', 'schedule', name='triggersource', native_enum=False, length=16), nullable=False),
    sa.Column('status', sa.Enum('active', 'paused', name='triggerstatus', native_enum=False, length=16), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('secret_encrypted', sa.Text(), nullable=True),
    sa.Column('on_active', sa.Enum('ignore', 'queue', 'restart', name='onactive', native_enum=False, length=16), nullable=False),
    sa.Column('budget_per_run_usd', sa.Numeric(precision=14, scale=6), nullable=False),
    sa.Column('budget_per_day_usd', sa.Numeric(precision=14, scale=6), nullable=True),
    sa.Column('max_concurrent', sa.Integer(), nullable=False),
    sa.Column('next_slot_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'name')
    )
    with op.batch_alter_table('triggers', schema=None) as batch_op:
        batch_op.create_index('ix_triggers_next_slot', ['next_slot_at'], unique=False, postgresql_where=SCHEDULED, sqlite_where=SCHEDULED)

    op.create_table('trigger_runs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('trigger_id', sa.String(length=32), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('subject', sa.String(length=300), nullable=True),
    sa.Column('status', sa.Enum('received', 'queued', 'starting', 'started', 'handed_off', 'ignored', 'refused', 'failed', name='runstatus', native_enum=False, length=16), nullable=False),
    sa.Column('fields', sa.JSON(), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('issue_comment_id', sa.String(length=64), nullable=True),
    sa.Column('result_noted', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('enqueued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['trigger_id'], ['triggers.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('trigger_id', 'key')
    )
    with op.batch_alter_table('trigger_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trigger_runs_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_trigger_runs_trigger_created', ['trigger_id', 'created_at'], unique=False)
        batch_op.create_index('ix_trigger_runs_open', ['id'], unique=False, postgresql_where=OPEN, sqlite_where=OPEN)


def downgrade() -> None:
    with op.batch_alter_table('trigger_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_trigger_runs_open', postgresql_where=OPEN, sqlite_where=OPEN)
        batch_op.drop_index('ix_trigger_runs_trigger_created')
        batch_op.drop_index(batch_op.f('ix_trigger_runs_project_id'))
    op.drop_table('trigger_runs')
    with op.batch_alter_table('triggers', schema=None) as batch_op:
        batch_op.drop_index('ix_triggers_next_slot', postgresql_where=SCHEDULED, sqlite_where=SCHEDULED)
    op.drop_table('triggers')
