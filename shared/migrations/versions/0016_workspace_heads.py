"""Workspaces in an object store (issue #29)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 21:00:00

``workspace_heads``: per project, the generation of its workspace and the object that holds it,
for coordinators configured with RAAS_WORKSPACE_STORE (the row lock serialises writers).
"""

from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('workspace_heads',
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('object_key', sa.String(length=512), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('project_id'),
    )


def downgrade() -> None:
    op.drop_table('workspace_heads')
