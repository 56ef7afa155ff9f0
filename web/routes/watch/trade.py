"""The first screen's trade panel (web/views/trade_panel.py) from the live frames and the advisor:
the deployments list (web/pages/main.py) includes it when the demo pair is stored, and
polls its fragment (GET /demo/trade) to keep it live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request

from services.demo.trade import COLOCATED_NAME, DISAGG_NAME
from state.store import Store
from web.deps import get_observer
from web.views import trade_panel
from web.views.live_advice import live

WINDOW = "1m"


def panel(request: Request, store: Store, state_of: Callable[[str], str]) -> dict[str, Any] | None:
    """Both sides and the headline; None unless both of the pair are stored. `state_of(name)`
    is the one word the deployments list shows for a deployment."""
    names = store.names()
    if COLOCATED_NAME not in names or DISAGG_NAME not in names:
        return None
    observer = get_observer(request)
    cards = []
    for name in (COLOCATED_NAME, DISAGG_NAME):
        frame = observer.frame(name, WINDOW) if observer is not None else None
        verdicts = live(request, store, name, WINDOW) if frame is not None else None
        cards.append(trade_panel.card(store.get(name).spec, state_of(name), frame, verdicts))
    colocated, disagg = cards
    return {
        "cards": cards,
        "headline": trade_panel.headline(colocated, disagg),
        "about": trade_panel.about(),
        "window": WINDOW,
    }
