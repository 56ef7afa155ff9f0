"""A prefill and a decode on different "nodes" (loopback addresses of this machine), each told
its node's address the way the controller renders it: NIXL's VLLM_NIXL_SIDE_CHANNEL_HOST,
MoRIIO's host_ip and proxy_ip. Both nodes use the same KV ports, so an engine that bound or
advertised any address but its own would collide, or pull from the wrong one. The prefill's
HTTP server binds either its node (`--host` = node) or every address (`--host 0.0.0.0`, as
in a pod): its KV side still takes only its node's address, which only the setting names."""

import json
import os
import socket
import subprocess
import sys

import pytest

from harness.processes import ROOT, Process, free_port, http_post, running, sim
from harness.stack import gauge, instances, proxy, wait_until

pytestmark = pytest.mark.e2e

PREFILL_NODE, DECODE_NODE, PROXY_NODE = "127.0.0.2", "127.0.0.3", "127.0.0.4"
PROMPT = "the quick brown fox " * 40
NIXL_PREFILL_LEG = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def refuses(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def wire_bytes(proc: Process, direction: str) -> float:
    return gauge(proc, "pdctl_sim_wire_bytes_total", direction=direction)


def on_node(tmp, node: str, role: str, http: int, listen: str, *flags: str, env=None) -> Process:
    """A stand-in on `node`, its HTTP server there or on every address; reached at `node`."""
    proc = sim(tmp, role, *flags, env=env, port=http, host=node if listen == "node" else "0.0.0.0")
    proc.url = f"http://{node}:{http}"
    return proc


def nixl_on(tmp, node: str, role: str, http: int, side: int, listen: str = "node") -> Process:
    config = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": node, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)}
    return on_node(tmp, node, role, http, listen, "--kv-transfer-config", config, env=env)


def moriio_on(
    tmp, node: str, role: str, read_mode: bool, ports: dict, registry: int, listen: str = "node"
) -> Process:
    extra = {
        "proxy_ip": PROXY_NODE,
        "proxy_ping_port": str(registry),
        "host_ip": node,
        "http_port": str(ports["http"]),
        "handshake_port": str(ports["handshake"]),
        "notify_port": str(ports["notify"]),
        "read_mode": "true" if read_mode else "false",
    }
    config = {
        "kv_connector": "MoRIIOConnector",
        "kv_role": role,
        "kv_connector_extra_config": extra,
    }
    flags = ("--no-enable-prefix-caching", "--registration-interval", "0.2")
    return on_node(
        tmp, node, role, ports["http"], listen, *flags, "--kv-transfer-config", json.dumps(config)
    )


@pytest.mark.parametrize("listen", ["node", "every-address"])
def test_nixl_prefill_advertises_its_node_and_the_decode_pulls_from_there(tmp_path, listen):
    http, side = free_port(), free_port()
    # On every address the prefill's HTTP port cannot be the decode's too.
    prefill_http = http if listen == "node" else free_port()
    prefill = nixl_on(tmp_path, PREFILL_NODE, "kv_producer", prefill_http, side, listen)
    decode = nixl_on(tmp_path, DECODE_NODE, "kv_consumer", http, side)
    with running(prefill, decode):
        assert refuses("127.0.0.1", side)  # each side channel listens on its node only
        status, leg = http_post(
            prefill.url + "/v1/completions",
            {"prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": NIXL_PREFILL_LEG},
        )
        assert status == 200, leg
        params = leg["kv_transfer_params"]
        assert (params["remote_host"], params["remote_port"]) == (PREFILL_NODE, side)

        front = proxy(
            tmp_path,
            "proxy",
            "--connector",
            "nixl",
            "--mode",
            "read",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
            host=PROXY_NODE,
        )
        with running(front):
            pulled = gauge(decode, "vllm:nixl_xfer_time_seconds_count")
            sent = wire_bytes(prefill, "sent")
            status, out = http_post(
                front.url + "/v1/completions",
                {"model": "tiny", "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True},
            )
            assert status == 200, out
            assert out["usage"]["completion_tokens"] == 6
            assert gauge(decode, "vllm:nixl_xfer_time_seconds_count") - pulled == 1
            assert wire_bytes(prefill, "sent") > sent  # the bytes left the prefill's node


def registered(front: Process) -> dict | None:
    """The proxy's instances by role, once both have registered."""
    seen = {i["role"]: i for i in instances(front)}
    return seen if len(seen) == 2 else None


@pytest.mark.parametrize("listen", ["node", "every-address"])
@pytest.mark.parametrize("read_mode", [True, False], ids=["read", "write"])
def test_moriio_instances_register_under_their_node_address_and_serve(tmp_path, read_mode, listen):
    registry = free_port()
    ports = {"http": free_port(), "handshake": free_port(), "notify": free_port()}
    prefill_ports = ports if listen == "node" else {**ports, "http": free_port()}
    front = proxy(
        tmp_path, "proxy", "--connector", "moriio", registry_port=registry, host=PROXY_NODE
    )
    with running(front):
        prefill = moriio_on(
            tmp_path, PREFILL_NODE, "kv_producer", read_mode, prefill_ports, registry, listen
        )
        decode = moriio_on(tmp_path, DECODE_NODE, "kv_consumer", read_mode, ports, registry)
        with running(prefill, decode):
            seen = wait_until(lambda: registered(front), 30, "both registrations")
            for role, proc in (("prefill", prefill), ("decode", decode)):
                node = proc.url.split("//")[1].split(":")[0]
                assert seen[role]["url"] == proc.url
                assert seen[role]["zmq_address"] == (
                    f"host:{node},handshake:{ports['handshake']},notify:{ports['notify']}"
                )
            assert refuses("127.0.0.1", ports["handshake"]) and refuses(
                "127.0.0.1", ports["notify"]
            )
            sent = wire_bytes(prefill, "sent")
            status, out = http_post(
                front.url + "/v1/completions",
                {"model": "tiny", "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True},
            )
            assert status == 200, out
            assert out["usage"]["completion_tokens"] == 5
            source = {"source": "external_kv_transfer"}
            assert gauge(decode, "vllm:prompt_tokens_by_source_total", **source) > 0
            assert wire_bytes(prefill, "sent") > sent


def test_a_side_channel_host_not_on_this_machine_exits_naming_the_variable():
    nixl = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})
    args = ["sim", "--port", str(free_port()), "--kv-transfer-config", nixl]
    done = subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        # 192.0.2.1 is TEST-NET-1: never an address of this machine.
        env={**os.environ, "COLUMNS": "200", "VLLM_NIXL_SIDE_CHANNEL_HOST": "192.0.2.1"},
    )
    assert done.returncode == 1, done.stderr
    assert "on VLLM_NIXL_SIDE_CHANNEL_HOST 192.0.2.1" in done.stderr
    assert "Traceback" not in done.stderr
