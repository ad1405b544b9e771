"""Notifications (issue #24): subscriptions and the notification outbox

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 14:45:00

``notification_subscriptions``: which events of a tenant's projects (or of one project) go to a
medium (a signed webhook, Slack, mail), its secret Fernet-encrypted. ``notifications``: one row per
event and subscription, written in the event's transaction, sent after commit by the coordinator's
sender (orchestrator.notify.sender).
"""

from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_table('notification_subscriptions',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', sa.String(length=32), nullable=True),
    sa.Column('project_id', sa.String(length=32), nullable=True),
    sa.Column('medium', sa.Enum('webhook', 'slack', 'mail', name='notificationmedium', native_enum=False, length=16), nullable=False),
    sa.Column('target', sa.String(length=2000), nullable=False),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.Column('secret_encrypted', sa.Text(), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('status', sa.Enum('active', 'paused', 'failing', name='subscriptionstatus', native_enum=False, length=16), nullable=False),
    sa.Column('consecutive_failures', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('notification_subscriptions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notification_subscriptions_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_notification_subscriptions_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('notifications',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('subscription_id', sa.String(length=32), nullable=False),
    sa.Column('project_id', sa.String(length=32), nullable=True),
    sa.Column('event_type', sa.String(length=50), nullable=False),
    sa.Column('event_key', sa.String(length=120), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('body', sa.Text(), nullable=True),
    sa.Column('status', sa.Enum('pending', 'sent', 'failed', name='notificationstatus', native_enum=False, length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('claimed_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['subscription_id'], ['notification_subscriptions.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('subscription_id', 'event_key')
    )
    with op.batch_alter_table('notifications', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notifications_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_notifications_subscription_id'), ['subscription_id'], unique=False)
        batch_op.create_index('ix_notifications_pending', ['next_attempt_at'], unique=False, postgresql_where=PENDING, sqlite_where=PENDING)


def downgrade() -> None:
    with op.batch_alter_table('notifications', schema=None) as batch_op:
        batch_op.drop_index('ix_notifications_pending', postgresql_where=PENDING, sqlite_where=PENDING)
        batch_op.drop_index(batch_op.f('ix_notifications_subscription_id'))
        batch_op.drop_index(batch_op.f('ix_notifications_project_id'))
    op.drop_table('notifications')
    with op.batch_alter_table('notification_subscriptions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notification_subscriptions_tenant_id'))
        batch_op.drop_index(batch_op.f('ix_notification_subscriptions_project_id'))
    op.drop_table('notification_subscriptions')
