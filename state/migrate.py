"""Alembic configured in code: the schema of a SQLite file moves to head (or anywhere) here."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(db: Path) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{db}")
    return config


def upgrade(db: Path, revision: str = "head") -> None:
    command.upgrade(alembic_config(db), revision)


def downgrade(db: Path, revision: str = "base") -> None:
    command.downgrade(alembic_config(db), revision)
