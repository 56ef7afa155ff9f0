"""revisions.state: in_progress | applied | failed | rolled_back (state/changes.py); every
revision stored before is applied

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("revisions") as batch:
        batch.add_column(
            sa.Column("state", sa.String(length=16), nullable=False, server_default="applied")
        )
        batch.create_index("ix_revisions_deployment_state", ["deployment_id", "state"])


def downgrade() -> None:
    with op.batch_alter_table("revisions") as batch:
        batch.drop_index("ix_revisions_deployment_state")
        batch.drop_column("state")
