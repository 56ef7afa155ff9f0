"""history: observe/'s downsampled frames, one row per deployment per few seconds

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment", sa.String(length=40), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_history_deployment_ts", "history", ["deployment", "ts"])
    op.create_index("ix_history_ts", "history", ["ts"])


def downgrade() -> None:
    op.drop_index("ix_history_ts", table_name="history")
    op.drop_index("ix_history_deployment_ts", table_name="history")
    op.drop_table("history")
