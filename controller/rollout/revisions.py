"""Where a change writes its target revision before it runs and settles it after: the
store's side of a change (state/changes.py), as the controller sees it."""

from __future__ import annotations

from typing import Any, Protocol

from controller.spec.deployment import DeploymentSpec
from state.changes import RevisionState


class SwitchRevisions(Protocol):
    """Where the target revision is written before the switch and settled after it."""

    def begin(self, name: str, spec: DeploymentSpec, actor: str, reason: str) -> int: ...

    def settle(
        self, name: str, revision: int, state: RevisionState, detail: str | None
    ) -> None: ...


class ChangeStore(Protocol):
    """The store's side of a change (state/changes.py)."""

    def deployments(self) -> list[Any]: ...

    def begin_change(
        self, name: str, spec: DeploymentSpec, actor: str, reason: str | None, kind: str = ...
    ) -> int: ...

    def settle_change(
        self, name: str, revision: int, state: str, detail: str | None = None
    ) -> None: ...


class StoreRevisions:
    """SwitchRevisions on the store (state/store/): a revision of kind "switch"."""

    def __init__(self, store: ChangeStore) -> None:
        self.store = store

    def begin(self, name: str, spec: DeploymentSpec, actor: str, reason: str) -> int:
        return self.store.begin_change(name, spec, actor, reason, kind="switch")

    def settle(self, name: str, revision: int, state: RevisionState, detail: str | None) -> None:
        self.store.settle_change(name, revision, state.value, detail)
