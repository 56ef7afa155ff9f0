"""The SQLite repository: deployments with their revisions, allocated ports and events.

Every change to a deployment writes a new revision and an event in one transaction. Writes
are serialized by a lock, so that checking other deployments' ports and claiming new ones
cannot interleave between two requests of this server. Each event, once committed, is
handed to `publish` (the live hub): one `pdctl serve` per database (web/database/lock.py) means
every write passes here, so nobody polls the table.

The store knows no spec: it is given the rules (`SpecRules`, controller/launch/stored_spec.py and
services/admission.py) that read, admit and show one. A stored revision is read back through
today's rules: one they refuse (NaN or Infinity written before they were refused, a field
since removed) is `Unreadable`, a 409 naming the field that says to replace it, never a 500;
it can still be replaced, deleted and listed.

While a revision is in progress (state/changes.py), or a rollout holds the deployment
(state/rollout_store.py), any other change is a 409 naming it.

The store is one class built of its parts: `rules` (what it is given about specs), `base` (the
engine, the write lock and the steps inside a write), `deployments` (with their revisions and
changes), `events`, and the rollouts of state/rollout_store.py.
"""

from __future__ import annotations

from state.rollout_store import Rollouts
from state.store.base import Current
from state.store.deployments import Deployments
from state.store.events import Events
from state.store.rules import SpecRules, Unfit

__all__ = ["Current", "SpecRules", "Store", "Unfit"]


class Store(Deployments, Events, Rollouts):
    """Deployments, revisions, events and rollouts in one SQLite database."""
