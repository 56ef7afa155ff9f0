"""placements: the node each process of a deployment was last placed on (its id, address and
GPUs), one row per deployment and process, gone with the deployment

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from state.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "placements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment", sa.String(length=40), nullable=False),
        sa.Column("process", sa.String(length=80), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("node_address", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.Float(), nullable=False),
        sa.Column("placed_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.ForeignKeyConstraint(
            ["deployment"],
            ["deployments.name"],
            ondelete="CASCADE",
            name="fk_placements_deployment",
        ),
        sa.UniqueConstraint("deployment", "process", name="uq_placements_deployment_process"),
    )


def downgrade() -> None:
    op.drop_table("placements")
