"""Coordinator replicas: the singleton lease and the facts they share (issue #29)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 21:05:00

``leases``: one row per singleton duty (the reconcile loop), its holder, epoch and expiry;
``cluster_facts``: values every replica must agree on (RAAS_SECRET_KEY's fingerprint).
"""

from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('leases',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('holder', sa.String(length=255), nullable=False),
    sa.Column('epoch', sa.Integer(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('resume_requested_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('name'),
    )
    op.create_table('cluster_facts',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.String(length=255), nullable=False),
    sa.PrimaryKeyConstraint('name'),
    )


def downgrade() -> None:
    op.drop_table('cluster_facts')
    op.drop_table('leases')
