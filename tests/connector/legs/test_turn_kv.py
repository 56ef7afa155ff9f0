"""The proxy's pure parts of bidirectional KV: the conversation key, the kept-params shape,
the bounded expiring store, and the settings that turn it on."""

from __future__ import annotations

import pytest

from connector.legs.rewrite import Handoff, Peer, prefill_body
from connector.legs.turn_kv import (
    TurnStore,
    answer_part,
    carried_params,
    next_turn_key,
    previous_turn_key,
    pull_back_params,
)
from connector.settings import ProxySettings
from tests.connector.fakes import refused_at

CHAT = "/v1/chat/completions"
FIRST = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
DECODE_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[3, 4]],
    "remote_engine_id": "d-1",
    "remote_request_id": "chatcmpl-1",
    "remote_host": "127.0.0.1",
    "remote_port": 5600,
    "remote_num_tokens": 30,
    "tp_size": 1,
    "transfer_mode": "pull",
}


def follow_up(answer: str, more: str = "and?") -> dict:
    messages = [*FIRST, {"role": "assistant", "content": answer}]
    return {"messages": [*messages, {"role": "user", "content": more}]}


def test_the_next_turn_finds_the_key_its_previous_turn_filed():
    filed = next_turn_key({"messages": FIRST}, "hello there")
    assert previous_turn_key(follow_up("hello there"), CHAT) == filed
    # whatever the new user text says
    assert previous_turn_key(follow_up("hello there", "other"), CHAT) == filed


def test_a_different_answer_or_history_is_another_conversation():
    filed = next_turn_key({"messages": FIRST}, "hello there")
    assert previous_turn_key(follow_up("hello"), CHAT) != filed
    other = follow_up("hello there")
    other["messages"][0]["content"] = "be long"
    assert previous_turn_key(other, CHAT) != filed


def test_extra_message_fields_do_not_change_the_key():
    body = follow_up("hello there")
    body["messages"][2]["name"] = "bot"
    assert previous_turn_key(body, CHAT) == next_turn_key({"messages": FIRST}, "hello there")


def test_the_key_uses_the_last_answer_of_a_long_conversation():
    two = follow_up("a1")
    third_prompt = two["messages"]
    filed = next_turn_key({"messages": third_prompt}, "a2")
    body = {"messages": [*third_prompt, {"role": "assistant", "content": "a2"}]}
    body["messages"].append({"role": "user", "content": "q3"})
    assert previous_turn_key(body, CHAT) == filed


@pytest.mark.parametrize(
    ("body", "endpoint"),
    [
        ({"messages": FIRST}, CHAT),  # a first turn
        ({"prompt": "hi assistant: yo"}, "/v1/completions"),  # cannot say
        ({"messages": "not a list"}, CHAT),
        ({"messages": ["text", {"role": "user", "content": "x"}]}, CHAT),
    ],
)
def test_no_key_without_an_earlier_answer(body, endpoint):
    assert previous_turn_key(body, endpoint) is None


def test_carried_params_keep_what_the_prefill_needs():
    carried = carried_params(DECODE_PARAMS)
    assert carried is not None
    assert "transfer_mode" not in carried and "do_remote_prefill" not in carried
    pull = pull_back_params(carried)
    assert pull["do_remote_decode"] is True and pull["do_remote_prefill"] is True
    assert pull["remote_request_id"] == "chatcmpl-1" and pull["remote_num_tokens"] == 30


@pytest.mark.parametrize(
    "params",
    [
        None,
        "text",
        {},
        {**DECODE_PARAMS, "do_remote_prefill": False},  # names no kept blocks
        {k: v for k, v in DECODE_PARAMS.items() if k != "remote_host"},
        {**DECODE_PARAMS, "remote_block_ids": []},
        {**DECODE_PARAMS, "remote_num_tokens": None},
    ],
)
def test_params_that_name_no_kept_blocks_are_not_carried(params):
    assert carried_params(params) is None


def test_the_prefill_leg_gets_the_pull_back_params():
    h = Handoff("nixl", "read", "ab" * 16, Peer(), Peer())
    plain = prefill_body({"model": "m", "messages": FIRST}, h)
    assert plain["kv_transfer_params"]["do_remote_prefill"] is False
    pull = pull_back_params(carried_params(DECODE_PARAMS))
    body = prefill_body({"model": "m", "messages": FIRST}, h, pull)
    assert body["kv_transfer_params"] == pull
    assert body["max_tokens"] == 1 and body["stream"] is False


@pytest.mark.parametrize(
    ("message", "part"),
    [
        (
            {"choices": [{"message": {"content": "whole"}}], "kv_transfer_params": {"a": 1}},
            ("whole", {"a": 1}),
        ),
        ({"choices": [{"delta": {"content": " tok"}}]}, (" tok", None)),
        ({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, ("", None)),
        ({"choices": [{"text": "completion"}]}, ("completion", None)),
        ({"choices": []}, ("", None)),
        ({"choices": [{"delta": {"content": 7}}]}, ("", None)),
        ("not an object", ("", None)),
    ],
)
def test_answer_parts(message, part):
    assert answer_part(message) == part


def test_the_store_takes_an_entry_once():
    store = TurnStore(4, ttl_s=10)
    store.put("k", {"p": 1}, now=0)
    assert store.take("k", now=1) == ({"p": 1}, "carried")
    assert store.take("k", now=2) == (None, "missed")


def test_the_store_expires_entries_at_the_ttl():
    store = TurnStore(4, ttl_s=10)
    store.put("k", {"p": 1}, now=0)
    assert store.take("k", now=10) == (None, "expired")
    store.put("a", {}, now=0)
    store.put("b", {}, now=5)
    store.put("c", {}, now=11)  # filing purges what expired
    assert len(store) == 2
    assert store.take("a", now=11) == (None, "missed")
    assert store.take("b", now=14)[1] == "carried"


def test_the_store_is_bounded_least_recently_filed_first():
    store = TurnStore(2, ttl_s=100)
    store.put("a", {}, now=0)
    store.put("b", {}, now=1)
    store.put("a", {"again": True}, now=2)  # filed again: now the newest
    store.put("c", {}, now=3)
    assert len(store) == 2 and store.evicted == 1
    assert store.take("b", now=4) == (None, "missed")
    assert store.take("a", now=4) == ({"again": True}, "carried")


@pytest.mark.parametrize(("entries", "ttl"), [(0, 10), (1, 0), (1, -1)])
def test_a_store_needs_room_and_a_ttl(entries, ttl):
    with pytest.raises(ValueError, match="at least one entry"):
        TurnStore(entries, ttl)


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"connector": "moriio", "mode": "read"}, "bidirectional_kv"),
        ({"mode": "colocated"}, "bidirectional_kv"),
        ({"kv_blocks_ttl": 0}, "kv_blocks_ttl"),
        ({"kv_blocks_ttl": 86_401}, "kv_blocks_ttl"),
        ({"bidir_max_conversations": 0}, "bidir_max_conversations"),
    ],
)
def test_settings_refuse_bidirectional_where_it_cannot_work(over, field):
    on = {"connector": "nixl", "mode": "read", "bidirectional_kv": True}
    assert refused_at(**{**on, **over}) == field


def test_settings_take_bidirectional_for_nixl_read():
    s = ProxySettings(port=0, mode="read", bidirectional_kv=True, kv_blocks_ttl=60)
    assert s.bidirectional_kv and s.kv_blocks_ttl == 60


# -- completions: a prompt that starts with an earlier prompt + answer --------------------


def test_a_prompt_finds_the_longest_filed_text_it_starts_with():
    store = TurnStore(10, 60.0)
    base = "system: you are an agent. " * 4
    store.put_text(base + "step one", {"n": 1}, 0.0)
    store.put_text(base + "step one, step two", {"n": 2}, 0.0)
    store.put_text("another conversation " * 5, {"n": 3}, 0.0)
    key = store.find_prefix(base + "step one, step two, step three")
    assert key is not None and store.take(key, 1.0) == ({"n": 2}, "carried")
    key = store.find_prefix(base + "step one, then")  # the shorter one still fits
    assert key is not None and store.take(key, 1.0) == ({"n": 1}, "carried")
    assert store.find_prefix(base + "step uno") is None  # same head, another text
    assert store.find_prefix("short") is None
    assert len(store) == 1


def test_a_text_is_found_only_whole_and_while_it_lives():
    store = TurnStore(2, 10.0)
    store.put_text("a" * 100, {"n": 1}, 0.0)
    assert store.find_prefix("a" * 99) is None  # shorter than what was filed
    assert store.find_prefix("a" * 100) is not None  # exactly it: continue generating
    assert store.find_prefix("a" * 150) is not None
    store.put_text("b" * 100, {"n": 2}, 0.0)
    store.put_text("c" * 100, {"n": 3}, 0.0)  # the bound pushes "a" out, index and all
    assert store.find_prefix("a" * 150) is None and store.evicted == 1
    store.put_text("d" * 100, {"n": 4}, 20.0)  # "b" and "c" expired
    assert store.find_prefix("b" * 150) is None and store.find_prefix("c" * 150) is None
    assert len(store) == 1 and store._by_head.keys() == {"d" * 64}


def test_a_chat_key_and_a_completion_text_never_meet():
    store = TurnStore(10, 60.0)
    store.put("abc", {"n": 1}, 0.0)  # a chat key
    assert store.find_prefix("abc and more") is None
    store.put_text("abc " * 20, {"n": 2}, 0.0)
    assert store.take("abc", 1.0) == ({"n": 1}, "carried")
    assert store.find_prefix("abc " * 20 + "and more") is not None
    store.put_text("tiny", {"n": 3}, 0.0)  # too short to be worth a pull: not filed
    assert store.find_prefix("tiny and more") is None and len(store) == 1
