"""The error a spec rule raises, located at the field it is about."""

from __future__ import annotations


class FieldError(ValueError):
    """A rule broken at a known place: `loc` is the field path, as in FastAPI's 422s."""

    def __init__(self, loc: tuple, message: str) -> None:
        super().__init__(message)
        self.loc, self.message = loc, message
