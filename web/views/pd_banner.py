"""The deployment page's "is PD happening?" banner from the frame's `pd` section
(observe/sections/pd_check.py): which decode recomputes its prompts and since when, or, on a
colocated deployment, a quiet note that the check does not apply. static/pdctl-live.js
redraws the same banner from each live frame."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

COLOCATED = "colocated: no KV hand-off, each instance computes its own prompts"


def pd_banner(section: Mapping[str, Any] | None, colocated: bool) -> dict[str, Any]:
    """{"state": recomputing | ok | not_applicable | unknown, "note", "decodes": [...]}."""
    if colocated:
        return {"state": "not_applicable", "note": f"PD check does not apply ({COLOCATED})"}
    if section is None or not section.get("applies"):
        return {"state": "unknown", "note": ""}
    rows = [r for r in section.get("decodes", ()) if r.get("status") == "recomputing"]
    if not rows:
        return {"state": "ok", "note": ""}
    return {
        "state": "recomputing",
        "note": "; ".join(_line(r) for r in rows),
    }


def _line(row: Mapping[str, Any]) -> str:
    share = row.get("share")
    figure = "no traffic since" if share is None else f"{share:.0%} of prompt tokens by KV transfer"
    since = row.get("since")
    when = "" if since is None else f" since {datetime.fromtimestamp(since, UTC):%H:%M:%S} UTC"
    return f"{row['instance']} recomputes its prompts{when} ({figure}, last 10 s)"
