"""Bidirectional KV in the stand-in, driven by hand like a proxy would: a decode with
bidirectional_kv_xfer keeps a finished turn's blocks and names them; a prefill given those
params pulls them back and computes only the rest, and falls back to computing everything
on every failure (nothing held, a peer gone, a prompt that does not extend the held one,
params it cannot read, bidirectional off)."""

import json
import time

import pytest

from domain.workload import tokenizer
from harness.processes import free_port, http_post, metric_value, running, sim

pytestmark = pytest.mark.e2e

PROMPT = list(range(100, 400))  # 300 tokens
ANSWER = 16
PREFILL_LEG = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def nixl(tmp_path, name, role, extra=None):
    config = {"kv_connector": "NixlConnector", "kv_role": role}
    if extra is not None:
        config["kv_connector_extra_config"] = extra
    return sim(
        tmp_path,
        name,
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pullback")
    on = {"bidirectional_kv_xfer": True}
    prefill, decode = (
        nixl(tmp, "prefill", "kv_producer", on),
        nixl(tmp, "decode", "kv_consumer", on),
    )
    short = nixl(tmp, "short", "kv_consumer", {**on, "decoder_kv_blocks_ttl": 0.2})
    plain = nixl(tmp, "plain", "kv_producer")
    with running(prefill, decode, short, plain):
        yield prefill, decode, short, plain


def complete(proc, prompt, **body):
    status, out = http_post(
        proc.url + "/v1/completions", {"prompt": prompt, "ignore_eos": True, **body}
    )
    assert status == 200, out
    return out


def first_turn(prefill, decode, prompt=PROMPT):
    """One turn through prefill then decode: (the decode's kept params, the answer's ids)."""
    handed = complete(prefill, prompt, max_tokens=1, kv_transfer_params=PREFILL_LEG)
    out = complete(
        decode, prompt, max_tokens=ANSWER, kv_transfer_params=handed["kv_transfer_params"]
    )
    return out.get("kv_transfer_params"), tokenizer.encode(out["choices"][0]["text"])


def pull_leg(kept):
    return {**kept, "do_remote_decode": True, "do_remote_prefill": True}


def sources(proc):
    text = proc.metrics()
    return {
        s: metric_value(text, "vllm:prompt_tokens_by_source_total", source=s) or 0
        for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
    }


def pullbacks(proc, outcome):
    return metric_value(proc.metrics(), "pdctl_sim_kv_pullbacks_total", outcome=outcome)


def spent(proc, prompt, params):
    before = sources(proc)
    complete(proc, prompt, max_tokens=1, kv_transfer_params=params)
    after = sources(proc)
    return {k: after[k] - before[k] for k in after}


def test_a_kept_turn_is_pulled_back_and_only_the_rest_computed(engines):
    prefill, decode, _, _ = engines
    kept, answer = first_turn(prefill, decode)
    assert kept["do_remote_prefill"] is True and kept["remote_block_ids"][0]
    held = len(PROMPT) + ANSWER - 1
    assert kept["remote_num_tokens"] == held
    assert metric_value(decode.metrics(), "vllm:kv_cache_usage_perc") > 0  # still held
    second = [*PROMPT, *answer, 7, 8, 9]
    used = spent(prefill, second, pull_leg(kept))
    assert used["external_kv_transfer"] == held
    assert used["local_compute"] == len(second) - held  # the 3 new and the answer's last
    assert pullbacks(prefill, "ok") >= 1
    # the decode freed the blocks once read: a second pull finds nothing and computes it all
    failed = pullbacks(prefill, "failed")
    used = spent(prefill, [*second, 10], pull_leg(kept))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(prefill, "failed") == failed + 1


def test_a_prompt_that_does_not_extend_the_kept_turn_is_computed(engines):
    prefill, decode, _, _ = engines
    prompt = list(range(500, 800))
    kept, answer = first_turn(prefill, decode, prompt)
    other = [*prompt, *[a + 1 for a in answer], 7]  # a different answer in the history
    mismatched = pullbacks(prefill, "mismatch")
    used = spent(prefill, other, pull_leg(kept))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(prefill, "mismatch") == mismatched + 1


def test_more_tokens_named_than_the_prompt_has_is_a_mismatch(engines):
    prefill, decode, _, _ = engines
    kept, _ = first_turn(prefill, decode, list(range(900, 1100)))
    mismatched = pullbacks(prefill, "mismatch")
    used = spent(prefill, list(range(900, 1000)), pull_leg(kept))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(prefill, "mismatch") == mismatched + 1


def test_an_unreachable_decode_is_a_failed_pull_and_the_prompt_computed(engines):
    prefill, _, _, _ = engines
    gone = {
        "remote_block_ids": [[1, 2]],
        "remote_engine_id": "gone",
        "remote_request_id": "nobody",
        "remote_host": "127.0.0.1",
        "remote_port": free_port(),
        "remote_num_tokens": 20,
    }
    failed = pullbacks(prefill, "failed")
    used = spent(prefill, list(range(40)), pull_leg(gone))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(prefill, "failed") == failed + 1


def test_params_it_cannot_read_are_ignored(engines):
    prefill, _, _, _ = engines
    bad = pull_leg({"remote_host": "127.0.0.1", "remote_port": "x", "remote_num_tokens": 5})
    before = {o: pullbacks(prefill, o) for o in ("ok", "failed", "mismatch", "off")}
    used = spent(prefill, list(range(60)), bad)
    assert used["external_kv_transfer"] == 0
    assert {o: pullbacks(prefill, o) for o in before} == before


def test_blocks_past_the_ttl_are_freed_and_the_pull_fails(engines):
    prefill, _, short, _ = engines
    prompt = list(range(1200, 1300))
    kept, answer = first_turn(prefill, short, prompt)
    assert kept is not None
    time.sleep(0.6)  # past the 0.2 s lease: the decode's next step frees them
    complete(short, [1, 2, 3], max_tokens=1)  # a step, so the expiry runs
    assert metric_value(short.metrics(), "vllm:kv_cache_usage_perc") == 0
    failed = pullbacks(prefill, "failed")
    used = spent(prefill, [*prompt, *answer, 5], pull_leg(kept))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(prefill, "failed") == failed + 1


def test_an_engine_with_bidirectional_off_ignores_pull_back_params(engines):
    _, decode, _, plain = engines
    handed = complete(plain, PROMPT, max_tokens=1, kv_transfer_params=PREFILL_LEG)
    out = complete(
        decode, PROMPT, max_tokens=ANSWER, kv_transfer_params=handed["kv_transfer_params"]
    )
    kept = out["kv_transfer_params"]  # the decode keeps (it is on); the prefill is off
    answer = tokenizer.encode(out["choices"][0]["text"])
    used = spent(plain, [*PROMPT, *answer, 1], pull_leg(kept))
    assert used["external_kv_transfer"] == 0
    assert pullbacks(plain, "off") == 1


def test_a_decode_with_it_off_names_nothing_to_keep(engines):
    prefill, _, _, plain = engines
    kept, _ = first_turn(prefill, plain)  # NIXL ignores kv_role: "plain" decodes here
    assert kept is None
