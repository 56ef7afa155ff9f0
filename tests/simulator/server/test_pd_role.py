"""The stand-in's runtime role switching state: phases, epochs and the admission fence, on the
event loop with a drained flag the test sets (no sockets)."""

import asyncio

import pytest

from simulator.config.engine import EngineConfigError, parse_kv_transfer_config
from simulator.server.pd_role import PDRoleState, RoleChangeRefused, parse_change


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def settle(state: PDRoleState, phase: str, tries: int = 500) -> None:
    for _ in range(tries):
        if state.phase == phase:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"phase {state.phase}, wanted {phase}")


def test_a_change_drains_admitted_requests_then_the_engine_then_commits():
    async def scenario():
        drained = [False]
        state = PDRoleState("decode", lambda: drained[0])
        state.admitted()  # a stream accepted before the POST
        state.start("prefill", 0, 30)
        assert state.phase == "draining" and state.target_role == "prefill"
        assert state.refusal("decode", "0") is not None  # admission closed at once
        await asyncio.sleep(0.02)
        assert state.phase == "draining"
        state.finished()
        await settle(state, "preparing")
        drained[0] = True
        await settle(state, "ready")
        assert (state.role, state.epoch, state.error) == ("prefill", 1, None)
        assert state.refusal("prefill", "1") is None
        assert state.refusal("decode", "0") is not None  # the old epoch is stale now
        assert state.status()["transition_seconds"] is not None

    run(scenario())


def test_a_stale_epoch_or_a_change_in_progress_is_refused():
    async def scenario():
        state = PDRoleState("decode", lambda: False)
        with pytest.raises(RoleChangeRefused, match="stale role epoch"):
            state.start("prefill", 3, 30)
        state.start("prefill", 0, 30)
        with pytest.raises(RoleChangeRefused, match="already"):
            state.start("decode", 0, 30)
        state.task.cancel()

    run(scenario())


def test_asking_for_the_role_it_serves_is_a_no_op_also_when_retried_after_the_change():
    async def scenario():
        state = PDRoleState("prefill", lambda: True)
        state.start("prefill", 0, 30)
        assert state.phase == "ready" and state.epoch == 0
        state.start("decode", 0, 30)
        await settle(state, "ready")
        state.start("decode", 0, 30)  # the same POST again: epoch 0 is one behind
        assert (state.role, state.epoch, state.phase) == ("decode", 1, "ready")

    run(scenario())


def test_a_drain_timeout_rolls_back_to_the_old_role_and_epoch():
    async def scenario():
        state = PDRoleState("prefill", lambda: False)  # KV held for a decode that never pulls
        state.start("decode", 0, 0.05)
        await settle(state, "preparing")
        await state.task
        assert (state.role, state.epoch, state.phase) == ("prefill", 0, "ready")
        assert "drain_timeout" in state.error
        assert state.refusal("prefill", "0") is None

    run(scenario())


def test_a_commit_that_fails_leaves_the_engine_fenced_in_failed():
    async def scenario():
        state = PDRoleState("prefill", lambda: True)

        async def broken(role):
            raise RuntimeError("engine core did not acknowledge")

        state.commit = broken
        state.start("decode", 0, 5)
        await state.task
        assert state.phase == "failed" and state.epoch == 0
        assert "did not acknowledge" in state.error
        assert "phase failed" in state.refusal("prefill", "0")
        with pytest.raises(RoleChangeRefused):
            state.start("decode", 0, 5)

    run(scenario())


def test_requests_need_both_headers_matching():
    state = PDRoleState("decode", lambda: True)
    assert state.refusal("decode", "0") is None
    assert state.refusal(None, None) is not None
    assert state.refusal("prefill", "0") is not None
    assert state.refusal("decode", "1") is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"expected_epoch": 0}, "role"),
        ({"role": "both", "expected_epoch": 0}, "role"),
        ({"role": "decode"}, "expected_epoch"),
        ({"role": "decode", "expected_epoch": True}, "expected_epoch"),
        ({"role": "decode", "expected_epoch": -1}, "expected_epoch"),
        ({"role": "decode", "expected_epoch": 0, "drain_timeout": 0}, "drain_timeout"),
        ({"role": "decode", "expected_epoch": 0, "drain_timeout": "9"}, "drain_timeout"),
    ],
)
def test_a_bad_change_names_its_field(body, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        parse_change(body)


def test_pd_role_is_parsed_only_for_nixl_kv_both():
    nixl = '{"kv_connector":"NixlConnector","kv_role":"kv_both","pd_role":"decode"}'
    assert parse_kv_transfer_config(nixl, 8100, {}).pd_role == "decode"
    plain = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    assert parse_kv_transfer_config(plain, 8100, {}).pd_role is None
    for bad in (
        '{"kv_connector":"NixlConnector","kv_role":"kv_producer","pd_role":"prefill"}',
        '{"kv_connector":"NixlConnector","kv_role":"kv_both","pd_role":"both"}',
        '{"kv_connector":"MooncakeConnector","kv_role":"kv_both","pd_role":"prefill"}',
    ):
        with pytest.raises(EngineConfigError, match="pd_role"):
            parse_kv_transfer_config(bad, 8100, {})
