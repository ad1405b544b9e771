"""The team loop (issue #25): PR rounds, approvals, what people say to agents

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 14:45:00

``person_messages``: what a person said to a project's agent, taken by one turn boundary.
``approvals``: durable waits for a person, with a deadline and a default action.
``pr_follows`` and ``pr_rounds``: a delivered pull request watched, and each round of feedback.
``projects.status`` widens to 20 characters for ``waiting_for_approval``.
"""

from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

UNDELIVERED = sa.text("delivered_at IS NULL")
WAITING = sa.text("status = 'waiting'")
PROJECT_STATUSES = ('created', 'running', 'paused', 'completed', 'failed', 'stopped')


def _enum(name: str, *values: str, length: int = 16) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, length=length)


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.alter_column(
            'status',
            existing_type=_enum('projectstatus', *PROJECT_STATUSES),
            type_=_enum('projectstatus', *PROJECT_STATUSES, 'waiting_for_approval', 'delivered', length=20),
            existing_nullable=False,
        )
    op.create_table('person_messages',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('agent_id', sa.String(length=32), nullable=True),
    sa.Column('author', sa.String(length=200), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('now', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('delivered_iteration_id', sa.String(length=32), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('person_messages', schema=None) as batch_op:
        batch_op.create_index('ix_person_messages_waiting', ['project_id'], unique=False,
                              postgresql_where=UNDELIVERED, sqlite_where=UNDELIVERED)
    op.create_table('approvals',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('key', sa.String(length=120), nullable=False),
    sa.Column('point', _enum('approvalpoint', 'task', 'plan', 'diff', 'spend'), nullable=False),
    sa.Column('task_id', sa.String(length=32), nullable=True),
    sa.Column('title', sa.String(length=300), nullable=False),
    sa.Column('status', _enum('approvalstatus', 'waiting', 'approved', 'rejected', 'paused'), nullable=False),
    sa.Column('default_action', _enum('approvalaction', 'approve', 'reject', 'pause'), nullable=False),
    sa.Column('deadline', sa.DateTime(timezone=True), nullable=True),
    sa.Column('approvers', sa.JSON(), nullable=True),
    sa.Column('decided_by', sa.String(length=200), nullable=True),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_id', 'key'),
    )
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_approvals_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_approvals_waiting', ['deadline'], unique=False,
                              postgresql_where=WAITING, sqlite_where=WAITING)
    op.create_table('pr_follows',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('delivery_id', sa.String(length=32), nullable=False),
    sa.Column('repo', sa.String(length=1000), nullable=False),
    sa.Column('pr_number', sa.Integer(), nullable=False),
    sa.Column('status', _enum('followstatus', 'watching', 'in_round', 'ended'), nullable=False),
    sa.Column('rounds', sa.Integer(), nullable=False),
    sa.Column('spent_at_start_usd', sa.Numeric(precision=14, scale=6), nullable=False),
    sa.Column('end_reason', sa.Text(), nullable=True),
    sa.Column('poll_state', sa.JSON(), nullable=True),
    sa.Column('polled_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['delivery_id'], ['deliveries.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_id'),
    )
    with op.batch_alter_table('pr_follows', schema=None) as batch_op:
        batch_op.create_index('ix_pr_follows_pr', ['repo', 'pr_number'], unique=False)
    op.create_table('pr_rounds',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('follow_id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=300), nullable=False),
    sa.Column('feedback', sa.JSON(), nullable=False),
    sa.Column('spent_at_start_usd', sa.Numeric(precision=14, scale=6), nullable=False),
    sa.Column('replied', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['follow_id'], ['pr_follows.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('follow_id', 'key'),
    )
    with op.batch_alter_table('pr_rounds', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pr_rounds_follow_id'), ['follow_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('pr_rounds', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pr_rounds_follow_id'))
    op.drop_table('pr_rounds')
    with op.batch_alter_table('pr_follows', schema=None) as batch_op:
        batch_op.drop_index('ix_pr_follows_pr')
    op.drop_table('pr_follows')
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.drop_index('ix_approvals_waiting', postgresql_where=WAITING, sqlite_where=WAITING)
        batch_op.drop_index(batch_op.f('ix_approvals_project_id'))
    op.drop_table('approvals')
    with op.batch_alter_table('person_messages', schema=None) as batch_op:
        batch_op.drop_index('ix_person_messages_waiting', postgresql_where=UNDELIVERED, sqlite_where=UNDELIVERED)
    op.drop_table('person_messages')
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.alter_column(
            'status',
            existing_type=_enum('projectstatus', *PROJECT_STATUSES, 'waiting_for_approval', 'delivered', length=20),
            type_=_enum('projectstatus', *PROJECT_STATUSES),
            existing_nullable=False,
        )
