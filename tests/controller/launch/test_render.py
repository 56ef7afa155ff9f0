"""Golden renders: the exact `vllm serve` argv/env, the `pdctl sim` argv and the proxy argv."""

import json
import shlex

import pytest

from controller.launch.ports import allocate
from controller.launch.render import (
    LaunchSettings,
    kv_transfer_config,
    node_address,
    preview,
    render,
)
from controller.spec.deployment import DeploymentSpec
from tests.controller.factories import BLOG_MODEL, mori_blog, nixl_1p1d

BLOG_ENV = {
    "VLLM_ROCM_USE_AITER": "1",
    "MORI_DISABLE_AUTO_XGMI": "1",
    "MORI_IO_ENABLE_NOTIFICATION": "0",
}
BLOG_FLAGS = [
    "-tp",
    "4",
    "--max-num-seqs",
    "64",
    "--max-num-batched-tokens",
    "4096",
    "--max-model-len",
    "16384",
    "--no-enable-prefix-caching",
]
BLOG_EXTRA = [
    "--enable-expert-parallel",
    "--distributed-executor-backend",
    "mp",
    "--gpu-memory-utilization",
    "0.9",
]


def moriio_config(role, http, handshake, notify, read_mode="false"):
    return json.dumps(
        {
            "kv_connector": "MoRIIOConnector",
            "kv_role": role,
            "kv_connector_extra_config": {
                "proxy_ip": "127.0.0.1",
                "proxy_ping_port": "36367",
                "http_port": str(http),
                "handshake_port": str(handshake),
                "notify_port": str(notify),
                "read_mode": read_mode,
            },
        },
        separators=(",", ":"),
    )


def by_name(spec, settings=None):
    return {launch.name: launch for launch in render(spec, allocate(spec), settings)}


def test_mori_blog_write_mode_renders_the_blog_commands():
    launches = by_name(mori_blog())
    assert list(launches) == ["proxy", "prefill-0", "decode-0"]  # the start order
    prefill, decode = launches["prefill-0"], launches["decode-0"]
    assert prefill.argv == [
        "vllm",
        "serve",
        BLOG_MODEL,
        "--port",
        "20005",
        "--host",
        "127.0.0.1",
        "--served-model-name",
        BLOG_MODEL,
        *BLOG_FLAGS,
        "--kv-transfer-config",
        moriio_config("kv_producer", 20005, 6301, 6105),
        *BLOG_EXTRA,
    ]
    assert decode.argv == [
        "vllm",
        "serve",
        BLOG_MODEL,
        "--port",
        "40005",
        "--host",
        "127.0.0.1",
        "--served-model-name",
        BLOG_MODEL,
        *BLOG_FLAGS,
        "--kv-transfer-config",
        moriio_config("kv_consumer", 40005, 7301, 7501),
        *BLOG_EXTRA,
    ]
    assert prefill.env == {
        **BLOG_ENV,
        "HIP_VISIBLE_DEVICES": "0,1,2,3",
        "VLLM_MORIIO_CONNECTOR_READ_MODE": "0",
    }
    assert decode.env == {
        **BLOG_ENV,
        "HIP_VISIBLE_DEVICES": "4,5,6,7",
        "VLLM_MORIIO_CONNECTOR_READ_MODE": "0",
    }
    assert prefill.command == shlex.join(prefill.argv)
    assert prefill.registers and decode.registers and prefill.mode == "write"
    assert launches["proxy"].argv == [
        "pdctl",
        "proxy",
        "--port",
        "10001",
        "--connector",
        "moriio",
        "--registry-port",
        "36367",
        "--policy",
        "round-robin",
        "--hold-queue",
        "256",
        "--hold-deadline",
        "30",
        "--slo-ttft-ms",
        "1000",
        "--slo-itl-ms",
        "50",
        "--itl-slo-stat",
        "p99",
    ]


def test_mori_blog_read_mode_sets_both_the_config_key_and_the_env_var():
    decode = by_name(mori_blog("read"))["decode-0"]
    config = json.loads(decode.argv[decode.argv.index("--kv-transfer-config") + 1])
    assert config["kv_connector_extra_config"]["read_mode"] == "true"
    assert decode.env["VLLM_MORIIO_CONNECTOR_READ_MODE"] == "1"


def test_moriio_turns_prefix_caching_off_unless_overridden_with_a_reason():
    spec = mori_blog(prefix_caching=True, prefix_caching_override_reason="measured: fine")
    assert "--no-enable-prefix-caching" not in by_name(spec)["prefill-0"].argv


def test_the_preview_shows_the_vllm_serve_line_whatever_runs():
    spec = mori_blog()
    shown = preview(spec, allocate(spec))
    line = shown["prefill-0"]["command"]
    assert line.startswith("vllm serve Qwen/Qwen3-235B-A22B-FP8 --port 20005 --host 127.0.0.1 ")
    assert shlex.split(line) == shown["prefill-0"]["argv"]
    assert shown["prefill-0"]["command_line"].startswith(
        "VLLM_ROCM_USE_AITER=1 MORI_DISABLE_AUTO_XGMI=1 MORI_IO_ENABLE_NOTIFICATION=0 "
        "HIP_VISIBLE_DEVICES=0,1,2,3 VLLM_MORIIO_CONNECTOR_READ_MODE=0 vllm serve "
    )
    # vLLM's CPU build runs as a module and takes the model by --model; the preview does not
    # change.
    cpu = LaunchSettings(vllm_command=("python", "-m", "vllm.entrypoints.openai.api_server"))
    launch = by_name(spec, cpu)["prefill-0"]
    assert launch.argv[:5] == [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        BLOG_MODEL,
    ]
    assert launch.argv[5:] == shown["prefill-0"]["argv"][3:]
    assert launch.command == line


def test_nixl_1p1d_renders_cuda_devices_and_side_channel_ports():
    launches = by_name(nixl_1p1d())
    model = "meta-llama/Llama-3.1-8B-Instruct"
    config = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    for name, port, gpu, side in (
        ("prefill-0", 8100, "0", "5600"),
        ("decode-0", 8200, "1", "5601"),
    ):
        assert launches[name].argv == [
            "vllm",
            "serve",
            model,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--served-model-name",
            model,
            "-tp",
            "1",
            "--kv-transfer-config",
            config,
        ]
        assert launches[name].env == {
            "CUDA_VISIBLE_DEVICES": gpu,
            "VLLM_NIXL_SIDE_CHANNEL_PORT": side,
        }
    assert launches["proxy"].argv == [
        "pdctl",
        "proxy",
        "--port",
        "8000",
        "--connector",
        "nixl",
        "--mode",
        "read",
        "--registry-port",
        "-1",
        "--policy",
        "round-robin",
        "--hold-queue",
        "256",
        "--hold-deadline",
        "30",
        "--slo-ttft-ms",
        "1000",
        "--slo-itl-ms",
        "50",
        "--itl-slo-stat",
        "p99",
        "--prefill",
        "http://127.0.0.1:8100",
        "--decode",
        "http://127.0.0.1:8200",
    ]


def test_the_stand_in_takes_the_same_flags_plus_its_own():
    spec = mori_blog(engine="sim", time_scale=4.0)
    settings = LaunchSettings(pdctl_command=("python", "pdctl.py"))
    sim = by_name(spec, settings)["prefill-0"]
    vllm = by_name(mori_blog())["prefill-0"]
    assert sim.argv == [
        "python",
        "pdctl.py",
        "sim",
        *vllm.argv[2:],
        "--model-profile",
        "qwen3-235b-a22b-fp8",
        "--hardware",
        "mi300x",
        "--time-scale",
        "4",
    ]
    assert sim.env == vllm.env and sim.command == vllm.command
    assert by_name(spec, settings)["proxy"].argv[:3] == ["python", "pdctl.py", "proxy"]


def test_colocated_proxy_balances_whole_requests():
    spec = DeploymentSpec.model_validate(
        {
            "name": "colo",
            "engine": "vllm",
            "model": "m",
            "topology": "colocated",
            "groups": [
                {
                    "name": "serve",
                    "role": "colocated",
                    "count": 2,
                    "tp": 2,
                    "gpus": [0, 1, 2, 3],
                    "ports": [{"http": 9001}, {"http": 9002}],
                }
            ],
            "proxy": {"port": 9000, "registry_port": 9009},
        }
    )
    launches = by_name(spec)
    assert "--kv-transfer-config" not in launches["serve-1"].argv
    assert launches["serve-1"].env == {"CUDA_VISIBLE_DEVICES": "2,3"}
    proxy = launches["proxy"].argv
    assert proxy[proxy.index("--mode") + 1] == "colocated"
    assert proxy[-4:] == [
        "--instance",
        "http://127.0.0.1:9001",
        "--instance",
        "http://127.0.0.1:9002",
    ]


@pytest.mark.parametrize(
    ("connector", "prefill_role", "decode_role"),
    [
        ("NixlConnector", "kv_both", "kv_both"),
        ("MooncakeConnector", "kv_producer", "kv_consumer"),
        ("LMCacheConnectorV1", "kv_producer", "kv_consumer"),
        ("P2pNcclConnector", "kv_producer", "kv_consumer"),
        ("ExampleConnector", "kv_producer", "kv_consumer"),
    ],
)
def test_every_connector_has_a_kv_transfer_config(connector, prefill_role, decode_role):
    spec = nixl_1p1d(connector=connector)
    ports = allocate(spec)
    roles = [
        kv_transfer_config(
            spec, g, ports.instances[f"{g.name}-0"], ports.registry, proxy_ip="127.0.0.1"
        )["kv_role"]
        for g in spec.groups
    ]
    assert roles == [prefill_role, decode_role]
    proxy = by_name(spec)["proxy"].argv
    assert proxy[proxy.index("--connector") + 1] == "nixl"


def test_argv_are_lists_and_operator_text_stays_one_argument():
    spec = nixl_1p1d(extra_args=["--chat-template", "{{ x }}; rm -rf /"])
    argv = by_name(spec)["decode-0"].argv
    assert argv[-2:] == ["--chat-template", "{{ x }}; rm -rf /"]
    assert shlex.split(by_name(spec)["decode-0"].command)[-1] == "{{ x }}; rm -rf /"


def test_kv_connector_extra_config_reaches_both_sides():
    spec = nixl_1p1d(kv_connector_extra_config={"backends": ["UCX"]})
    for name in ("prefill-0", "decode-0"):
        argv = by_name(spec)[name].argv
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert config == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        }


def test_a_groups_kv_extra_config_wins_over_the_deployments_for_its_instances_only():
    base = nixl_1p1d(
        connector="ExampleConnector",
        kv_connector_extra_config={"shared_storage_path": "/srv/kv", "keep": 1},
    ).model_dump(mode="json")
    base["groups"][1]["kv_connector_extra_config"] = {"shared_storage_path": "/srv/other"}
    spec = DeploymentSpec.model_validate(base)
    extras = {}
    for name in ("prefill-0", "decode-0"):
        argv = by_name(spec)[name].argv
        extras[name] = json.loads(argv[argv.index("--kv-transfer-config") + 1])[
            "kv_connector_extra_config"
        ]
    assert extras["prefill-0"] == {"shared_storage_path": "/srv/kv", "keep": 1}
    assert extras["decode-0"] == {"shared_storage_path": "/srv/other", "keep": 1}


def test_example_connector_shares_one_absolute_folder_unless_given_one():
    def folder(spec: DeploymentSpec) -> set[str]:
        configs = [
            json.loads(a.argv[a.argv.index("--kv-transfer-config") + 1])
            for a in render(spec, allocate(spec))
            if not a.is_proxy
        ]
        return {c["kv_connector_extra_config"]["shared_storage_path"] for c in configs}

    assert folder(nixl_1p1d(connector="ExampleConnector")) == {"/tmp/pdctl-kv-nixl-1p1d"}
    given = {"shared_storage_path": "/srv/kv"}
    assert folder(nixl_1p1d(connector="ExampleConnector", kv_connector_extra_config=given)) == {
        "/srv/kv"
    }


def test_proxy_leg_timeouts_are_passed_only_when_set():
    spec = mori_blog()
    timed = spec.model_copy(
        update={
            "proxy": spec.proxy.model_copy(
                update={"prefill_timeout_s": 5.0, "decode_timeout_s": 2.5}
            )
        }
    )
    argv = by_name(timed)["proxy"].argv
    assert argv[argv.index("--prefill-timeout") + 1] == "5"
    assert argv[argv.index("--decode-timeout") + 1] == "2.5"
    assert "--decode-timeout" not in by_name(spec)["proxy"].argv


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_every_engine_binds_its_nodes_address_never_every_interface(engine):
    spec = mori_blog(engine=engine)
    for settings, host in (
        (LaunchSettings(), "127.0.0.1"),
        (LaunchSettings(host="10.0.0.5"), "10.0.0.5"),
        (LaunchSettings(bind_host="0.0.0.0"), "0.0.0.0"),
    ):
        assert node_address(settings) == host
        for launch in by_name(spec, settings).values():
            if launch.is_proxy:
                continue
            i = launch.argv.index("--host")
            assert launch.argv[i + 1] == host and launch.argv.count("--host") == 1


def test_the_preview_says_which_defaults_an_engine_takes():
    shown = preview(mori_blog(), allocate(mori_blog()))
    assert shown["prefill-0"]["defaults"] == (
        "--enable-chunked-prefill on (decoder-only generative model); --block-size 16 (GPUs)"
    )  # the blog sets both batch flags and prefix caching
    assert "defaults" not in shown["proxy"]
    spec = mori_blog()
    spec.groups[0].max_num_batched_tokens = None
    spec.groups[0].max_num_seqs = None
    shown = preview(spec, allocate(spec))
    assert (
        "--max-num-seqs 1024, --max-num-batched-tokens 16384 (AMD Instinct MI300X: >= 160 GiB"
        in (shown["prefill-0"]["defaults"])
    )


def test_proxy_retry_and_ejection_settings_are_passed_only_when_set():
    spec = mori_blog()
    proxy = spec.proxy.model_copy(
        update={
            "first_byte_timeout_s": 1.5,
            "retry_attempts": 2,
            "retry_deadline_s": 10.0,
            "retry_budget_ratio": 0.1,
            "eject_max_share": 0.25,
        }
    )
    argv = by_name(spec.model_copy(update={"proxy": proxy}))["proxy"].argv
    for flag, value in (
        ("--first-byte-timeout", "1.5"),
        ("--retry-attempts", "2"),
        ("--retry-deadline", "10"),
        ("--retry-budget-ratio", "0.1"),
        ("--eject-max-share", "0.25"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert "--first-byte-timeout" not in by_name(spec)["proxy"].argv
