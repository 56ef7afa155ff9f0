"""MoRIIO without AMD's `mori`: vLLM's own MoRIIO modules import, and vLLM's real registration
sender (`MoRIIOConnectorWorker._start_heartbeat`, fed the --kv-transfer-config pdctl renders and
parsed by vLLM's own `get_moriio_mode`) registers stand-ins with `pdctl proxy`, which then
routes requests through them; when the heartbeats stop, the proxy drops them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from domain.kv_connectors import InstanceKv, KvPorts, backend_for
from domain.modes import Connector, Mode, Role
from harness.processes import ADMIN_TOKEN, Process, free_port, http_post, running
from harness.stack import instances, moriio_sim

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

MODULES = (
    "moriio_common",
    "moriio_connector",
    "moriio_engine",
    "moriio_heartbeat",
    "moriio_layout",
)
PACKAGE = "vllm.distributed.kv_transfer.kv_connector.v1.moriio"

IMPORTS = textwrap.dedent(f"""
    import importlib, json
    try:
        import mori  # noqa: F401
        has_mori = True
    except ImportError:
        has_mori = False
    imported = [m for m in {list(MODULES)!r} if importlib.import_module("{PACKAGE}." + m)]
    from {PACKAGE}.moriio_common import MoRIIOConstants
    from {PACKAGE}.moriio_connector import is_moriio_available
    print(json.dumps({{"has_mori": has_mori, "imported": imported,
                      "available": is_moriio_available(),
                      "ping_interval": MoRIIOConstants.PING_INTERVAL}}))
""")

# Argv[1]: [{"config": <rendered kv-transfer-config>, "ip": ...}, ...]. Beats until stdin closes.
HEARTBEATS = textwrap.dedent(f"""
    import json, sys, types
    from vllm.config.kv_transfer import KVTransferConfig
    from {PACKAGE}.moriio_common import get_moriio_mode
    from {PACKAGE}.moriio_connector import MoRIIOConnectorWorker

    beats = []
    for inst in json.loads(sys.argv[1]):
        config = KVTransferConfig(**inst["config"])
        extra = config.kv_connector_extra_config
        # The attributes MoRIIOConnectorWorker.__init__ sets from the config, without the
        # IOEngine that needs mori.
        worker = types.SimpleNamespace(
            is_producer=config.is_kv_producer, local_ip=inst["ip"],
            request_address=inst["ip"] + ":" + extra["http_port"],
            handshake_port=int(extra["handshake_port"]), notify_port=int(extra["notify_port"]),
            moriio_config=types.SimpleNamespace(dp_size=1, tp_size=1),
            mode=get_moriio_mode(config), proxy_ip=extra["proxy_ip"],
            proxy_ping_port=int(extra["proxy_ping_port"]))
        beats.append(MoRIIOConnectorWorker._start_heartbeat(worker))
    print("beating", flush=True)
    sys.stdin.read()
    for beat in beats:
        beat.shutdown()
""")


def vllm_run(python, code: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [str(python), "-c", code, *args], capture_output=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


def test_moriio_modules_import_without_mori(vllm_setup):
    found = json.loads(vllm_run(vllm_setup.python, IMPORTS).strip().splitlines()[-1])
    assert found == {
        "has_mori": False,
        "imported": list(MODULES),
        "available": False,
        "ping_interval": 3,
    }


@contextlib.contextmanager
def heartbeats(python, registrations: list[dict]):
    """vLLM's real heartbeat senders, one per registration, in a process group of their own."""
    proc = subprocess.Popen(
        [str(python), "-c", HEARTBEATS, json.dumps(registrations)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline() == b"beating\n"
        yield proc
    finally:
        proc.stdout.close()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def stand_in_config(proc: Process, registry: int) -> dict:
    """The config pdctl renders for this stand-in's ports (controller/launch/render.py's path)."""
    config = json.loads(proc.args[proc.args.index("--kv-transfer-config") + 1])
    extra, role = config["kv_connector_extra_config"], config["kv_role"]
    ports = KvPorts(
        http=int(extra["http_port"]),
        handshake=int(extra["handshake_port"]),
        notify=int(extra["notify_port"]),
    )
    inst = InstanceKv(
        Role.PREFILL if role == "kv_producer" else Role.DECODE,
        mode=Mode.READ if extra["read_mode"] == "true" else Mode.WRITE,
        ports=ports,
        registry_port=registry,
    )
    return backend_for(Connector.MORIIO).kv_transfer_config(inst)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def test_real_heartbeats_register_with_the_proxy(vllm_setup, tmp_path):
    registry, port = free_port(), free_port()
    front = Process(
        ["proxy", "--port", str(port), "--connector", "moriio", "--registry-port", str(registry)],
        port,
        env={"PDCTL_ADMIN_TOKEN": ADMIN_TOKEN},  # /admin is never open
        log_path=tmp_path / "proxy.log",
    )
    # Stand-ins that do not register themselves: vLLM's sender registers them.
    prefill = moriio_sim(tmp_path, "prefill", "kv_producer", True)
    decode = moriio_sim(tmp_path, "decode", "kv_consumer", True)
    with running(front, prefill, decode):
        beats = [
            {"config": stand_in_config(p, registry), "ip": "127.0.0.1"} for p in (prefill, decode)
        ]
        with heartbeats(vllm_setup.python, beats):
            listed = wait_for(
                lambda: len(instances(front)) == 2 and instances(front), 15, "two registrations"
            )
            seen = {i["role"]: i for i in listed}
            assert {r: (i["url"], i["group"], i["source"]) for r, i in seen.items()} == {
                "prefill": (prefill.url, "read", "registry"),
                "decode": (decode.url, "read", "registry"),
            }
            extra = beats[0]["config"]["kv_connector_extra_config"]
            assert seen["prefill"]["zmq_address"] == (
                f"host:127.0.0.1,handshake:{extra['handshake_port']},notify:{extra['notify_port']}"
            )
            status, body = http_post(
                front.url + "/v1/completions",
                {"model": "tiny", "prompt": "one two three", "max_tokens": 5, "ignore_eos": True},
            )
            assert status == 200, body
            assert body["usage"]["completion_tokens"] == 5
        # Silence: the proxy drops both after three missed 3 s beats.
        wait_for(lambda: instances(front) == [], 20, "registrations expired")
