"""Two real stand-ins as prefill and decode, driven by hand like a proxy would."""

import json
import threading
import time
import uuid

import msgpack
import pytest
import zmq

from harness.processes import free_port, http_post, metric_value, running, sim

pytestmark = pytest.mark.e2e

MODEL = ("--model-profile", "llama-3.1-8b", "--hardware", "l40s", "--kv-link-gbps", "50")
PROMPT = list(range(100, 2100))  # 2,000 tokens: ~130 ms of prefill on an L40S
NIXL_PREFILL = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def nixl(tmp_path, name, role, policy="fail"):
    config = {"kv_connector": "NixlConnector", "kv_role": role, "kv_load_failure_policy": policy}
    return sim(
        tmp_path,
        name,
        *MODEL,
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )


def moriio(tmp_path, name, role, read_mode, extra=None, flags=()):
    port = free_port()
    config = {
        "kv_connector": "MoRIIOConnector",
        "kv_role": role,
        "kv_connector_extra_config": {
            "http_port": str(port),
            "handshake_port": str(free_port()),
            "notify_port": str(free_port()),
            "read_mode": "true" if read_mode else "false",
            **(extra or {}),
        },
    }
    proc = sim(
        tmp_path, name, *MODEL, *flags, "--kv-transfer-config", json.dumps(config), port=port
    )
    return proc, config["kv_connector_extra_config"]


def hand_off_seconds(tokens: int) -> float:
    """The hand-off model's transfer time for MODEL's stand-ins on one machine."""
    from domain import profiles
    from simulator.config.engine import EngineSettings, KVTransferSettings

    settings = EngineSettings(
        model_profile="llama-3.1-8b", hardware="l40s", kv_link_gbps=50.0, kv=KVTransferSettings()
    )
    link = settings.handoff_link(same_node=True)
    return link.transfer_seconds(profiles.model("llama-3.1-8b"), tokens, settings.block_size)


def complete(proc, **body):
    return http_post(proc.url + "/v1/completions", {"prompt": PROMPT, "ignore_eos": True, **body})


@pytest.fixture(scope="module")
def nixl_pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nixl")
    prefill, decode = nixl(tmp, "prefill", "kv_producer"), nixl(tmp, "decode", "kv_consumer")
    with running(prefill, decode):
        yield prefill, decode


def test_nixl_read_mode_moves_the_kv_and_decode_skips_the_prompt(nixl_pair):
    prefill, decode = nixl_pair
    status, first = complete(prefill, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
    assert status == 200
    params = first["kv_transfer_params"]
    assert params["do_remote_prefill"] is True
    assert params["remote_request_id"].startswith(first["id"] + "-0-")  # vLLM's internal id
    assert params["remote_block_ids"] and params["remote_port"] > 0
    held = prefill.metrics()
    prefill_ttft = metric_value(held, "vllm:time_to_first_token_seconds_sum")
    assert metric_value(held, "vllm:kv_cache_usage_perc") > 0  # blocks held for the decode
    status, out = complete(decode, max_tokens=8, kv_transfer_params=params)
    assert status == 200 and out["usage"]["completion_tokens"] == 8

    # Same text as a colocated run; the decode's first token equals the prefill's.
    _, colocated = complete(prefill, max_tokens=8)
    assert out["choices"][0]["text"] == colocated["choices"][0]["text"]
    assert out["choices"][0]["text"].split()[0] == first["choices"][0]["text"].strip()

    p_metrics, d_metrics = prefill.metrics(), decode.metrics()
    sent = metric_value(p_metrics, "pdctl_sim_wire_bytes_total", direction="sent")
    received = metric_value(d_metrics, "pdctl_sim_wire_bytes_total", direction="received")
    assert sent == received > 0
    assert metric_value(d_metrics, "vllm:nixl_xfer_time_seconds_count") == 1
    assert metric_value(d_metrics, "vllm:nixl_bytes_transferred_sum") == 1999 * 131072
    assert (
        metric_value(d_metrics, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
        == 1999
    )
    # The decode's TTFT is the modelled hand-off and one step, not the 2,000-token prefill.
    # On an L40S (no P2P, no RDMA) the hand-off is staged through host memory and outlasts
    # the prefill itself (simulator/model/handoff.py); the 50 GB/s link is its wire part.
    decode_ttft = metric_value(d_metrics, "vllm:time_to_first_token_seconds_sum")
    handoff = hand_off_seconds(1999)
    assert handoff > prefill_ttft
    assert handoff < decode_ttft < handoff + prefill_ttft / 2
    # The prefill freed the blocks the decode took.
    assert metric_value(p_metrics, "vllm:kv_cache_usage_perc") == 0


def test_unknown_blocks_fail_the_request_with_policy_fail(nixl_pair):
    prefill, decode = nixl_pair
    _, first = complete(prefill, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
    bogus = dict(first["kv_transfer_params"], remote_request_id="cmpl-never-existed")
    status, err = complete(decode, max_tokens=4, kv_transfer_params=bogus)
    assert status == 500 and err["error"]["message"] == "Internal server error"  # as vLLM
    assert "cmpl-never-existed" in decode.log()  # the reason goes to the log
    assert metric_value(decode.metrics(), "vllm:nixl_num_failed_transfers_total") >= 1


def test_second_read_of_taken_blocks_fails(nixl_pair):
    prefill, decode = nixl_pair
    _, first = complete(prefill, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
    assert complete(decode, max_tokens=2, kv_transfer_params=first["kv_transfer_params"])[0] == 200
    status, err = complete(decode, max_tokens=2, kv_transfer_params=first["kv_transfer_params"])
    assert status == 500 and err["error"]["type"] == "InternalServerError"
    assert "already taken" in decode.log()


def test_recompute_policy_computes_the_prompt_locally(tmp_path):
    prefill = nixl(tmp_path, "prefill", "kv_producer")
    decode = nixl(tmp_path, "decode", "kv_consumer", policy="recompute")
    with running(prefill, decode):
        _, first = complete(prefill, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
        bogus = dict(first["kv_transfer_params"], remote_request_id="cmpl-gone")
        status, out = complete(decode, max_tokens=4, kv_transfer_params=bogus)
        assert status == 200 and out["usage"]["completion_tokens"] == 4
        text = decode.metrics()
        assert (
            metric_value(text, "vllm:prompt_tokens_by_source_total", source="local_compute") == 2000
        )


def test_invalid_nixl_params_compute_locally_like_vllm(nixl_pair):
    _, decode = nixl_pair
    status, out = complete(decode, max_tokens=2, kv_transfer_params={"do_remote_prefill": True})
    assert status == 200 and out["usage"]["completion_tokens"] == 2


def test_moriio_read_mode_by_hand(tmp_path):
    (prefill, _), (decode, _) = (
        moriio(tmp_path, "p", "kv_producer", True),
        moriio(tmp_path, "d", "kv_consumer", True),
    )
    with running(prefill, decode):
        tx = "tx-" + uuid.uuid4().hex
        _, first = complete(
            prefill,
            max_tokens=1,
            kv_transfer_params={
                "do_remote_decode": True,
                "do_remote_prefill": False,
                "transfer_id": tx,
                "remote_dp_size": 1,
                "remote_tp_size": 1,
            },
        )
        params = first["kv_transfer_params"]
        assert params["transfer_id"] == tx and params["remote_handshake_port"] > 0
        status, out = complete(
            decode,
            max_tokens=5,
            kv_transfer_params={
                "do_remote_decode": False,
                "do_remote_prefill": True,
                "transfer_id": tx,
                "remote_engine_id": params["remote_engine_id"],
                "remote_block_ids": params["remote_block_ids"],
                "remote_host": params["remote_host"],
                "remote_handshake_port": params["remote_handshake_port"],
                "remote_dp_size": 1,
                "remote_tp_size": 1,
            },
        )
        assert status == 200 and out["usage"]["completion_tokens"] == 5
        assert (
            metric_value(decode.metrics(), "pdctl_sim_wire_bytes_total", direction="received")
            == metric_value(prefill.metrics(), "pdctl_sim_wire_bytes_total", direction="sent")
            > 0
        )


def test_moriio_write_mode_dispatches_both_legs_at_once(tmp_path):
    (prefill, p_extra), (decode, d_extra) = (
        moriio(tmp_path, "p", "kv_producer", False),
        moriio(tmp_path, "d", "kv_consumer", False),
    )
    with running(prefill, decode):
        tx = "tx-" + uuid.uuid4().hex
        p_addr = (
            f"host:127.0.0.1,handshake:{p_extra['handshake_port']},notify:{p_extra['notify_port']}"
        )
        d_addr = (
            f"host:127.0.0.1,handshake:{d_extra['handshake_port']},notify:{d_extra['notify_port']}"
        )
        header = {
            "X-Request-Id": f"___prefill_addr_{p_addr}___decode_addr_{d_addr}_" + uuid.uuid4().hex
        }
        results = {}

        def leg(name, proc, body):
            results[name] = http_post(
                proc.url + "/v1/completions",
                {"prompt": PROMPT, "ignore_eos": True, **body},
                headers=header,
            )

        # The decode goes first: it must wait for the push, not fail.
        threads = [
            threading.Thread(
                target=leg,
                args=(
                    "d",
                    decode,
                    {
                        "max_tokens": 6,
                        "kv_transfer_params": {
                            "do_remote_decode": False,
                            "do_remote_prefill": True,
                            "transfer_id": tx,
                            "remote_dp_size": 1,
                            "remote_tp_size": 1,
                        },
                    },
                ),
            )
        ]
        threads.append(
            threading.Thread(
                target=leg,
                args=(
                    "p",
                    prefill,
                    {
                        "max_tokens": 1,
                        "kv_transfer_params": {
                            "do_remote_decode": True,
                            "do_remote_prefill": False,
                            "transfer_id": tx,
                        },
                    },
                ),
            )
        )
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join(timeout=30)
        assert results["p"][0] == 200 and results["d"][0] == 200
        assert results["d"][1]["usage"]["completion_tokens"] == 6
        d_metrics = decode.metrics()
        # Like real MoRIIO: no vllm:nixl_* families; the transfer shows as external tokens.
        assert "vllm:nixl_xfer_time_seconds" not in d_metrics
        assert (
            metric_value(
                d_metrics, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"
            )
            == len(PROMPT) - 1
        )
        assert metric_value(d_metrics, "pdctl_sim_wire_bytes_total", direction="received") > 0
        # The push freed the prefill's blocks without a read.
        assert metric_value(prefill.metrics(), "vllm:kv_cache_usage_perc") == 0


def test_moriio_decode_without_transfer_id_is_refused(tmp_path):
    (prefill, _) = moriio(tmp_path, "p", "kv_producer", True)
    with running(prefill):
        status, err = complete(prefill, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
        assert status == 400 and err["error"]["param"] == "kv_transfer_params.transfer_id"


def test_registration_heartbeats_reach_the_registry_and_stop_when_killed(tmp_path):
    ping = free_port()
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"tcp://127.0.0.1:{ping}")
    try:
        proc, extra = moriio(
            tmp_path,
            "p",
            "kv_producer",
            False,
            {"proxy_ip": "127.0.0.1", "proxy_ping_port": str(ping)},
            flags=("--registration-interval", "0.2"),
        )
        with running(proc):
            messages = []
            deadline = time.monotonic() + 10
            while len(messages) < 3 and time.monotonic() < deadline:
                if router.poll(500):
                    _, payload = router.recv_multipart()
                    messages.append(msgpack.unpackb(payload))
            assert len(messages) >= 3
            msg = messages[0]
            assert msg["type"] == "P" and msg["transfer_mode"] == "WRITE"
            assert msg["http_address"] == f"127.0.0.1:{proc.port}"
            assert msg["zmq_address"] == (
                f"host:127.0.0.1,handshake:{extra['handshake_port']},notify:{extra['notify_port']}"
            )
            assert msg["tp_size"] == 1 and msg["dp_size"] == 1
            proc.kill()
            while router.poll(100):
                router.recv_multipart()  # drain what was in flight
            assert not router.poll(1000)  # five intervals of silence
    finally:
        router.close(linger=0)


def test_unclaimed_kv_expires_after_the_abort_timeout(tmp_path):
    env_p = {
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
        "VLLM_NIXL_ABORT_REQUEST_TIMEOUT": "1",
    }
    config = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})
    prefill = sim(tmp_path, "p", *MODEL, "--kv-transfer-config", config, env=env_p)
    decode = nixl(tmp_path, "d", "kv_consumer")
    with running(prefill, decode):
        _, first = complete(prefill, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
        assert metric_value(prefill.metrics(), "vllm:kv_cache_usage_perc") > 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if metric_value(prefill.metrics(), "vllm:nixl_num_kv_expired_reqs_total") == 1:
                break
            time.sleep(0.1)
        assert metric_value(prefill.metrics(), "vllm:kv_cache_usage_perc") == 0
        status, _ = complete(decode, max_tokens=2, kv_transfer_params=first["kv_transfer_params"])
        assert status == 500 and "expired" in decode.log()


def test_time_scale_slows_the_wall_clock_but_reports_modelled_times(tmp_path):
    from domain import profiles
    from simulator.model.timing import TimingModel

    modelled = TimingModel(
        profiles.model("llama-3.1-8b"), profiles.hardware("l40s"), 1
    ).prefill_seconds(len(PROMPT))
    slow = sim(tmp_path, "slow", *MODEL, "--time-scale", "4", "--no-enable-prefix-caching")
    with running(slow):
        start = time.monotonic()
        status, _ = complete(slow, max_tokens=1)
        wall = time.monotonic() - start
        ttft = metric_value(slow.metrics(), "vllm:time_to_first_token_seconds_sum")
    assert status == 200
    assert abs(ttft - modelled) < 0.2 * modelled
    assert wall > 3 * modelled
