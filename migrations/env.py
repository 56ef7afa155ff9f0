"""Alembic environment: configured in code by state/migrate.py (no alembic.ini needed).

Runs online only, on the connection state/migrate.py passes in, or on an engine for the
configured sqlalchemy.url (the `alembic` command with -x/ini). Batch mode, so later
migrations can alter SQLite tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlmodel import SQLModel

import state.models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"), poolclass=sa.NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
