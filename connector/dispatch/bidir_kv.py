"""The proxy's side of bidirectional KV for multi-turn (the pure parts: connector/legs/turn_kv.py):
before a chat request (or a completion whose prompt is a single string) is routed, an earlier
turn's kept-KV params are taken for its prefill leg; after it was served, the decode's
returned params are filed for the next turn."""

from __future__ import annotations

from typing import Any

from connector.dispatch.flight import Flight, clock
from connector.legs.turn_kv import (
    TurnStore,
    carried_params,
    next_turn_key,
    previous_turn_key,
    pull_back_params,
)
from connector.measure.metrics import ProxyMetrics
from connector.settings import ProxySettings


class BidirectionalKV:
    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics) -> None:
        self.store = TurnStore(settings.bidir_max_conversations, settings.kv_blocks_ttl)
        self.metrics = metrics

    def before(self, body: dict[str, Any], endpoint: str, flight: Flight) -> None:
        """A turn collects its answer (to key the next turn); a follow-up takes the KV params
        its previous turn's decode kept, for its prefill leg. A completion is a follow-up when
        its prompt starts with an earlier completion's prompt + answer."""
        if endpoint.endswith("/chat/completions"):
            flight.answer = []
            key = previous_turn_key(body, endpoint)
        elif isinstance(body.get("prompt"), str):
            flight.answer = []
            key = self.store.find_prefix(body["prompt"])
        else:
            return  # token ids or several prompts: nothing to key a next turn by
        if key is None:
            return
        params, outcome = self.store.take(key, clock())
        self.metrics.bidir[outcome] += 1
        if params is not None:
            flight.pull_params = pull_back_params(params)
            offered = params.get("remote_num_tokens")
            if isinstance(offered, int) and not isinstance(offered, bool):
                self.metrics.bidir_tokens_offered += max(0, offered)

    def after(self, body: dict[str, Any], flight: Flight) -> None:
        """A turn served whole: file the decode's kept-KV params under it plus its answer."""
        carried = carried_params(flight.returned_kv)
        if carried is None or flight.error is not None or flight.answer is None:
            return
        answer = "".join(flight.answer)
        if "messages" in body:
            self.store.put(next_turn_key(body, answer), carried, clock())
        else:
            self.store.put_text(body["prompt"] + answer, carried, clock())
        self.metrics.bidir["stored"] += 1
