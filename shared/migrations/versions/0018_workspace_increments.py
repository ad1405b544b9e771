"""Workspaces as a base and increments (issue #29)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 04:30:00

``workspace_heads`` gains ``base_generation`` and ``workspace_increments`` holds a row per write
since the base: a write stores what it added, not the whole repository again. A head written
before holds a full bundle of its generation, which is a base with no increments.
"""

from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('workspace_heads', sa.Column('base_generation', sa.BigInteger(), server_default='0', nullable=False))
    op.execute('UPDATE workspace_heads SET base_generation = generation')
    op.create_table('workspace_increments',
    sa.Column('project_id', sa.String(length=32), nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('refs', sa.JSON(), nullable=False),
    sa.Column('pack', sa.LargeBinary(), nullable=True),
    sa.Column('object_key', sa.String(length=512), nullable=True),
    sa.PrimaryKeyConstraint('project_id', 'generation'),
    )


def downgrade() -> None:
    # The code before reads a head's object as its whole generation: true only of a head with no
    # increment after its base. Compacting the others needs the object store, out of SQL's reach.
    behind = op.get_bind().execute(
        sa.text('SELECT count(*) FROM workspace_heads WHERE base_generation <> generation')
    ).scalar_one()
    if behind:
        raise RuntimeError(
            f'{behind} workspace(s) hold increments the code before 0018 cannot read: '
            'downgrading would lose their latest writes; keep this version'
        )
    op.drop_table('workspace_increments')
    op.drop_column('workspace_heads', 'base_generation')
