"""Placeholder until its verbs land (this session)."""

from __future__ import annotations


def register(app: object) -> None:
    return None
