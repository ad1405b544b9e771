"""A pause's reason in its own column; iterations.task_id is celery_task_id

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 02:00:00

``projects.status_reason`` held a pause as ``"<reason>: <message>"``, parsed back with
``LIKE``/``startswith``; the reason moves to ``pause_reason`` and ``status_reason`` keeps the
words. ``iterations.task_id`` held a Celery task's id beside ``agents.task_id``, a DAG task's.
Batch mode, so that SQLite (the embedded engine) can alter its tables too.
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

# The reasons as they were written before this migration (shared.models.PauseReason's values).
PAUSE_REASONS = ('user', 'budget_exceeded', 'circuit_breaker', 'api_key_required')


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pause_reason', sa.Enum(*PAUSE_REASONS, name='pausereason', native_enum=False, length=16), nullable=True))
    for reason in PAUSE_REASONS:
        op.execute(
            sa.text(
                "UPDATE projects SET pause_reason = :reason, status_reason = substr(status_reason, :cut) "
                "WHERE status = 'paused' AND status_reason LIKE :prefix"
            ).bindparams(reason=reason, cut=len(reason) + 3, prefix=f'{reason}: %')
        )
    with op.batch_alter_table('iterations', schema=None) as batch_op:
        batch_op.alter_column('task_id', new_column_name='celery_task_id', existing_type=sa.String(length=64), existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table('iterations', schema=None) as batch_op:
        batch_op.alter_column('celery_task_id', new_column_name='task_id', existing_type=sa.String(length=64), existing_nullable=True)
    op.execute(
        "UPDATE projects SET status_reason = pause_reason || ': ' || coalesce(status_reason, '') "
        "WHERE pause_reason IS NOT NULL"
    )
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_column('pause_reason')
