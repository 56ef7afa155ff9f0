"""rollouts: every rollout of a running deployment, the engine's whole record as JSON;
start_samples: how long each instance group took to start, the latest 200 per group

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from state.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment", sa.String(length=40), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("strategy", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,  # an id is never given twice, even after a delete
    )
    op.create_index("ix_rollouts_deployment_id", "rollouts", ["deployment", "id"])
    op.create_index("ix_rollouts_state", "rollouts", ["state"])
    op.create_table(
        "start_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment", sa.String(length=40), nullable=False),
        sa.Column("grp", sa.String(length=80), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("ts", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_start_samples_deployment_grp_id", "start_samples", ["deployment", "grp", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_start_samples_deployment_grp_id", table_name="start_samples")
    op.drop_table("start_samples")
    op.drop_index("ix_rollouts_state", table_name="rollouts")
    op.drop_index("ix_rollouts_deployment_id", table_name="rollouts")
    op.drop_table("rollouts")
