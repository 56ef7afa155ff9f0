"""The role move body: its drain defaults to the autopilot's 300 s (domain/role_moves.py), and a
drain out of bounds is refused naming the field (tests/e2e/rollout/test_role_move.py moves
for real)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from domain.role_moves import DRAIN_TIMEOUT_S
from web.routes.deployment.role_moves import RoleMoveRequest

MOVE = {"instance": "prefill-1", "role": "decode", "reason": "decodes saturated"}


def test_the_drain_defaults_to_what_a_saturated_decode_needs():
    assert RoleMoveRequest(**MOVE).drain_timeout_s == DRAIN_TIMEOUT_S == 300.0


@pytest.mark.parametrize("drain", [0, -1, 3601, float("inf"), "soon"])
def test_a_drain_out_of_bounds_names_the_field(drain):
    with pytest.raises(ValidationError) as err:
        RoleMoveRequest(**MOVE, drain_timeout_s=drain)
    assert [e["loc"] for e in err.value.errors()] == [("drain_timeout_s",)]
