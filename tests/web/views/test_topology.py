"""The deployment page's topology after a runtime role move: an instance is drawn under the
group of the role it serves (role_switch.serving), marked as moved; before a move, and for
every instance not moved, under its own group."""

from __future__ import annotations

import re

from tests.specs import nixl_1p1d

HX = {"HX-Request": "true"}


def pair(serving: dict[str, str] | None) -> dict:
    body = nixl_1p1d(
        "rs",
        groups=[
            {"name": "prefill", "role": "prefill"},
            {"name": "decode", "role": "decode", "count": 2},
        ],
    )
    if serving is not None:
        body["role_switch"] = {"serving": serving}
    return body


def drawn(html: str) -> dict[str, list[str]]:
    """Group name -> the instances drawn in its box, in order."""
    out: dict[str, list[str]] = {}
    boxes = re.split(r'<div class="group role-[a-z]+" data-group="', html)[1:]
    for box in boxes:
        name = box.split('"', 1)[0]
        out[name] = re.findall(r'<div class="node[^"]*" data-instance="([^"]+)"', box)
    return out


def test_a_moved_instance_is_drawn_under_the_role_it_serves(pd_and_solo):
    client = pd_and_solo
    assert client.post("/api/deployments", json=pair({"decode-1": "prefill"})).status_code == 201
    html = client.get("/deployments/rs/topology", headers=HX).text
    assert drawn(html) == {"prefill": ["prefill-0", "decode-1"], "decode": ["decode-0"]}
    moved = html[html.index('data-instance="decode-1"') :]
    moved = moved[: moved.index("</div>")]
    assert 'data-serves="prefill"' in moved
    assert 'data-moved-from="decode"' in moved and "moved from decode" in moved
    assert "data-moved-from" not in html[: html.index('data-instance="decode-1"')]


def test_without_a_move_every_instance_is_under_its_own_group(pd_and_solo):
    client = pd_and_solo
    assert client.post("/api/deployments", json=pair({})).status_code == 201
    html = client.get("/deployments/rs/topology", headers=HX).text
    assert drawn(html) == {"prefill": ["prefill-0"], "decode": ["decode-0", "decode-1"]}
    assert "data-moved-from" not in html
