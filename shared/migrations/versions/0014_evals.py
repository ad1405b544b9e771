"""Eval suites, runs and attempts (issue #27)

Revision ID: 0014
Revises: 0010
Create Date: 2026-11-26 17:40:00

``eval_runs``: a suite (packed, with its digest) × configurations × k, the eval-wide budget and
concurrency, and what makes it reproducible; ``eval_attempts``: one row per task × config ×
attempt, unique on those, with its project, state, outcome, infra cause, test output and cost;
``eval_checks``: one row per task of a ``raas eval check --remote``, answered by a worker
(orchestrator.evals, workers.evaluation).
"""

from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0010'
branch_labels = None
depends_on = None

OPEN = sa.text("state <> 'done'")


def upgrade() -> None:
    op.create_table('eval_runs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', sa.String(length=32), nullable=True),
    sa.Column('suite_name', sa.String(length=100), nullable=False),
    sa.Column('suite_digest', sa.String(length=64), nullable=False),
    sa.Column('suite_archive', sa.LargeBinary(), nullable=False),
    sa.Column('tasks', sa.JSON(), nullable=False),
    sa.Column('configs', sa.JSON(), nullable=False),
    sa.Column('k', sa.Integer(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('budget_usd', sa.Numeric(precision=14, scale=6), nullable=True),
    sa.Column('attempt_budget_usd', sa.Numeric(precision=14, scale=6), nullable=True),
    sa.Column('reproducibility', sa.JSON(), nullable=False),
    sa.Column('status', sa.Enum('running', 'paused', 'completed', name='evalrunstatus', native_enum=False, length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('eval_attempts',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('task_key', sa.String(length=100), nullable=False),
    sa.Column('config', sa.String(length=100), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('state', sa.Enum('pending', 'starting', 'running', 'testing', 'done', 'paused', name='attemptstate', native_enum=False, length=16), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=True),
    sa.Column('cap_usd', sa.Numeric(precision=14, scale=6), nullable=False),
    sa.Column('outcome', sa.Enum('resolved', 'failed', 'infra', name='attemptoutcome', native_enum=False, length=16), nullable=True),
    sa.Column('infra_cause', sa.Text(), nullable=True),
    sa.Column('stop_reason', sa.Text(), nullable=True),
    sa.Column('test_exit_code', sa.Integer(), nullable=True),
    sa.Column('test_output_tail', sa.Text(), nullable=True),
    sa.Column('image', sa.String(length=300), nullable=True),
    sa.Column('cost_usd', sa.Numeric(precision=14, scale=6), nullable=False),
    sa.Column('input_tokens', sa.Integer(), nullable=False),
    sa.Column('output_tokens', sa.Integer(), nullable=False),
    sa.Column('cache_read_tokens', sa.Integer(), nullable=False),
    sa.Column('cache_write_tokens', sa.Integer(), nullable=False),
    sa.Column('iterations', sa.Integer(), nullable=False),
    sa.Column('wall_time_s', sa.Double(), nullable=True),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('test_sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['eval_runs.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'task_key', 'config', 'attempt')
    )
    op.create_table('eval_checks',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('check_id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', sa.String(length=32), nullable=True),
    sa.Column('task_key', sa.String(length=100), nullable=False),
    sa.Column('task_archive', sa.LargeBinary(), nullable=False),
    sa.Column('image', sa.String(length=300), nullable=True),
    sa.Column('timeout_s', sa.Double(), nullable=False),
    sa.Column('admitted', sa.Boolean(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('eval_checks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_eval_checks_check_id'), ['check_id'], unique=False)
    with op.batch_alter_table('eval_attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_eval_attempts_run_id'), ['run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_eval_attempts_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_eval_attempts_open', ['run_id'], unique=False, postgresql_where=OPEN, sqlite_where=OPEN)


def downgrade() -> None:
    with op.batch_alter_table('eval_attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_eval_attempts_open', postgresql_where=OPEN, sqlite_where=OPEN)
        batch_op.drop_index(batch_op.f('ix_eval_attempts_project_id'))
        batch_op.drop_index(batch_op.f('ix_eval_attempts_run_id'))
    op.drop_table('eval_attempts')
    op.drop_table('eval_runs')
    with op.batch_alter_table('eval_checks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_eval_checks_check_id'))
    op.drop_table('eval_checks')
