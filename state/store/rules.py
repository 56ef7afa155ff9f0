"""What the store is given about specs, since it knows none (state/store/): `SpecRules`, the
rules that read, admit and show one, and `Unfit`, their refusal of a stored spec or its ports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Unfit(ValueError):
    """A stored spec or its ports that today's rules refuse, at `loc`."""

    def __init__(self, loc: tuple, why: str) -> None:
        super().__init__(why)
        self.loc, self.why = tuple(loc), why


class SpecRules(Protocol):
    """What the store asks of the spec's owner (the controller, and the web for admission)."""

    def load(self, spec: dict, ports: dict) -> tuple[Any, Any]:
        """The typed spec and ports of a stored revision, or Unfit."""
        ...

    def admit(self, spec: Any, others: Mapping[int, str], previous: tuple | None) -> Any:
        """The ports `spec` gets (others: port -> the deployment claiming it), or an error."""
        ...

    def claimed(self, spec: Mapping, ports: Mapping) -> set[int]: ...
    def dump(self, spec: Any) -> dict: ...
    def dump_ports(self, ports: Any) -> dict: ...
    def redact(self, spec: dict) -> dict: ...
    def unsafe(self, spec: Any) -> tuple[str, dict] | None: ...
    def renamed(self, name: str, spec: Any) -> Exception | None: ...
    def fresh(self, spec: Any, name: str) -> Any: ...
