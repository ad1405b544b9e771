"""The projects list's indexes: newest first by (created_at, id), per tenant and cluster-wide

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 05:10:00

The dashboard's projects list pages by keyset on ``(created_at, id)`` (queries/listing.py); with
only ``ix_projects_tenant_id`` a page read every row of the tenant. The composite index starts
with ``tenant_id``, so it replaces that one.
"""

from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.create_index('ix_projects_tenant_created', ['tenant_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_projects_created', ['created_at', 'id'], unique=False)
        batch_op.drop_index('ix_projects_tenant_id')


def downgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.create_index('ix_projects_tenant_id', ['tenant_id'], unique=False)
        batch_op.drop_index('ix_projects_created')
        batch_op.drop_index('ix_projects_tenant_created')
