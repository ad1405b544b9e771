"""Projects started from a git repository, and tenants' git credentials

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 04:30:00

``git_credentials``: a tenant's credential per git host (an HTTPS username and token, or an SSH
key), its secret stored only as a Fernet token (orchestrator.remotes.credentials); one per
(tenant, host). ``projects.source_repo``, ``source_ref`` and ``source_commit``: the repository a
project was submitted from (``raas submit --repo``), its branch and the commit the workspace
started from, which the delivery pushes on top of.
Batch mode, so that SQLite (the embedded engine) can alter its tables too.
"""

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('git_credentials',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', sa.String(length=32), nullable=True),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('kind', sa.Enum('token', 'ssh_key', name='credentialkind', native_enum=False, length=16), nullable=False),
    sa.Column('username', sa.String(length=200), nullable=False),
    sa.Column('secret_encrypted', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'host')
    )
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('source_repo', sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column('source_ref', sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column('source_commit', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_column('source_commit')
        batch_op.drop_column('source_ref')
        batch_op.drop_column('source_repo')

    op.drop_table('git_credentials')
