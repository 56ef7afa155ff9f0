"""Runtime role switching on two real stand-ins (NIXL, kv_both with a pd_role), over HTTP."""

import json
import threading
import time
import urllib.request

import pytest

from harness.processes import free_port, http_get, http_post, running, sim

pytestmark = pytest.mark.e2e

MODEL = ("--model-profile", "llama-3.1-8b", "--hardware", "l40s", "--served-model-name", "tiny")
NIXL_PREFILL = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def switchable(tmp_path, name, pd_role):
    config = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "pd_role": pd_role}
    return sim(
        tmp_path,
        name,
        *MODEL,
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd_role")
    prefill, decode = switchable(tmp, "prefill", "prefill"), switchable(tmp, "decode", "decode")
    with running(prefill, decode):
        yield prefill, decode


def role(url):
    status, body = http_get(url + "/v1/pd_role")
    assert status == 200
    return json.loads(body)


def headers(state):
    return {"X-vLLM-PD-Role": state["role"], "X-vLLM-PD-Epoch": str(state["epoch"])}


def wait_ready(url, tries=400):
    for _ in range(tries):
        state = role(url)
        if state["phase"] in ("ready", "failed"):
            return state
        time.sleep(0.025)
    raise AssertionError(f"{url} still {state}")


def completion(max_tokens=4, **extra):
    return {"model": "tiny", "prompt": list(range(100, 400)), "max_tokens": max_tokens, **extra}


def test_started_roles_read_at_epoch_zero(pair):
    prefill, decode = pair
    assert role(prefill.url) | {"transition_seconds": None} == {
        "role": "prefill",
        "epoch": 0,
        "phase": "ready",
        "target_role": None,
        "active_requests": 0,
        "error": None,
        "transition_seconds": None,
    }
    assert role(decode.url)["role"] == "decode"


def test_requests_without_or_with_stale_headers_get_409_before_they_run(pair):
    prefill, _ = pair
    status, body = http_post(prefill.url + "/v1/completions", completion())
    assert status == 409 and body["role"] == "prefill" and body["epoch"] == 0
    stale = {"X-vLLM-PD-Role": "decode", "X-vLLM-PD-Epoch": "0"}
    status, body = http_post(prefill.url + "/v1/completions", completion(), headers=stale)
    assert status == 409 and "stale" in body["detail"]
    assert http_get(prefill.url + "/health")[0] == 200  # never fenced
    assert http_get(prefill.url + "/metrics")[0] == 200


def test_a_bad_post_is_a_400_naming_the_field_and_a_stale_epoch_a_409(pair):
    prefill, _ = pair
    status, body = http_post(prefill.url + "/v1/pd_role", {"role": "x", "expected_epoch": 0})
    assert status == 400 and body["detail"].startswith("role:")
    status, body = http_post(prefill.url + "/v1/pd_role", {"role": "decode", "expected_epoch": 7})
    assert status == 409 and "stale role epoch" in body["detail"]


def test_kv_held_for_a_decode_blocks_the_drain_until_timeout_then_rolls_back(pair):
    prefill, decode = pair
    p = role(prefill.url)
    status, answer = http_post(
        prefill.url + "/v1/completions",
        completion(max_tokens=1, kv_transfer_params=NIXL_PREFILL),
        headers=headers(p),
    )
    assert status == 200 and answer["kv_transfer_params"]["do_remote_prefill"] is True
    change = {"role": "decode", "expected_epoch": 0, "drain_timeout": 0.3}
    status, body = http_post(prefill.url + "/v1/pd_role", change)
    assert status == 202 and body["phase"] == "draining" and body["target_role"] == "decode"
    state = wait_ready(prefill.url)
    assert (state["role"], state["epoch"], state["phase"]) == ("prefill", 0, "ready")
    assert "drain_timeout" in state["error"]
    # the KV it kept is still there for the decode it was meant for
    d = role(decode.url)
    status, out = http_post(
        decode.url + "/v1/completions",
        completion(kv_transfer_params=answer["kv_transfer_params"], ignore_eos=True),
        headers=headers(d),
    )
    assert status == 200 and out["usage"]["completion_tokens"] == 4
    # pulled and released: now the change goes through
    status, _ = http_post(prefill.url + "/v1/pd_role", {**change, "drain_timeout": 30})
    assert status == 202
    state = wait_ready(prefill.url)
    assert (state["role"], state["epoch"], state["error"]) == ("decode", 1, None)
    status, _ = http_post(prefill.url + "/v1/completions", completion(), headers=headers(p))
    assert status == 409  # the old role and epoch are stale now


def test_a_stream_accepted_before_the_change_finishes_whole(pair):
    _, decode = pair
    d = role(decode.url)
    result = {}

    def raw_stream():
        req = urllib.request.Request(
            decode.url + "/v1/completions",
            data=json.dumps(completion(max_tokens=300, stream=True, ignore_eos=True)).encode(),
            headers={"Content-Type": "application/json", **headers(d)},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            result["status"], result["text"] = resp.status, resp.read().decode()

    thread = threading.Thread(target=raw_stream)
    thread.start()
    for _ in range(400):
        if role(decode.url)["active_requests"] == 1:
            break
        time.sleep(0.01)
    change = {"role": "prefill", "expected_epoch": d["epoch"], "drain_timeout": 60}
    status, body = http_post(decode.url + "/v1/pd_role", change)
    assert status == 202 and body["active_requests"] == 1
    thread.join(60)
    assert result["status"] == 200 and result["text"].rstrip().endswith("data: [DONE]")
    events = [line for line in result["text"].splitlines() if line.startswith("data: {")]
    assert sum(1 for e in events if json.loads(e[6:])["choices"]) == 300
    state = wait_ready(decode.url)
    assert (state["role"], state["epoch"]) == ("prefill", d["epoch"] + 1)
