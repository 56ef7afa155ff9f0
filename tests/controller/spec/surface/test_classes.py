"""Issue 39's findings, each as a class: what names code (Broken 1), a host path outside the
operator's roots, a server elsewhere, a listener beyond the bound address (Weak 5). Each
refusal is at its field, in every place a spec gives engine env and args (top level, a
group, a render group), and says why; the variants are the ones tried beyond the report's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.spec.surface.reach import EngineReach
from controller.spec.validation import engine_problems
from tests.specs import edited, epd_1e1p1d, nixl_1p1d, spec

ROOT = "/srv/pdctl-models"
REACH = EngineReach(roots=(ROOT,))


def with_render(body: dict) -> dict:
    return {**body, "groups": [*body["groups"], {"name": "render", "role": "render"}]}


def found(body: dict, reach: EngineReach = REACH) -> list[tuple[tuple, str]]:
    return [(p.loc, p.msg) for p in engine_problems(spec(body), overrides_on=False, reach=reach)]


def env_places(env: dict[str, str]) -> list[tuple[dict, tuple]]:
    """The spec with `env` at the top level, in a group, in a render group."""
    base = with_render(nixl_1p1d(engine="vllm"))
    return [
        ({**base, "env": env}, ("env",)),
        (edited(base, ("groups", 1, "env"), env), ("groups", 1, "env")),
        (edited(base, ("groups", 2, "env"), env), ("groups", 2, "env")),
    ]


def refused_env(env: dict[str, str], name: str, says: str) -> None:
    for body, where in env_places(env):
        hits = [msg for loc, msg in found(body) if loc == (*where, name)]
        assert hits and says in hits[0], (where, found(body))


# Broken 1: code through the environment -------------------------------------------------


def test_ucx_gdb_command_is_code_everywhere() -> None:
    env = {"UCX_HANDLE_ERRORS": "debug", "UCX_GDB_COMMAND": "/tmp/evil.sh"}
    refused_env(env, "UCX_GDB_COMMAND", "a program UCX runs on a crash signal")
    refused_env(env, "UCX_HANDLE_ERRORS", "takes one of bt, none")


@pytest.mark.parametrize(
    ("env", "name", "says"),
    [
        ({"UCX_HANDLE_ERRORS": "freeze"}, "UCX_HANDLE_ERRORS", "takes one of bt, none"),
        ({"UCX_HANDLE_ERRORS": "bt,debug"}, "UCX_HANDLE_ERRORS", "takes one of"),
        ({"UCX_MODULE_DIR": "/tmp/ucx"}, "UCX_MODULE_DIR", "where UCX loads its modules"),
        ({"UCX_MODULES": "evil"}, "UCX_MODULES", "is code: "),
        ({"UCX_SOME_NEW_KNOB": "1"}, "UCX_SOME_NEW_KNOB", "is not an engine setting"),
        ({"NCCL_TUNER_PLUGIN": "/tmp/t.so"}, "NCCL_TUNER_PLUGIN", "is code: "),
        ({"NCCL_CONF_FILE": "/tmp/n.conf"}, "NCCL_CONF_FILE", "past this table"),
        ({"NIXL_PLUGIN_DIR": "/tmp/p"}, "NIXL_PLUGIN_DIR", "is code: "),
        ({"VLLM_NIC_SELECTION_VARS": "LD_PRELOAD"}, "VLLM_NIC_SELECTION_VARS", "is code: "),
        ({"CUDA_INJECTION64_PATH": "/tmp/i.so"}, "CUDA_INJECTION64_PATH", "is code: "),
        ({"HF_MODULES_CACHE": "/tmp/m"}, "HF_MODULES_CACHE", "is code: "),
        ({"PYTHONPATH": "/tmp"}, "PYTHONPATH", "is not an engine setting"),
    ],
)
def test_names_of_programs_modules_libraries_and_plugins_are_code(
    env: dict[str, str], name: str, says: str
) -> None:
    refused_env(env, name, says)


@pytest.mark.parametrize(
    "value", ["ext://evil", "ext://os.system", "cfg://handlers.x", " EXT://evil", "ext://sys.argv"]
)
def test_vllm_logging_stream_takes_only_stdout_and_stderr(value: str) -> None:
    refused_env({"VLLM_LOGGING_STREAM": value}, "VLLM_LOGGING_STREAM", "takes one of")
    for ok in ("ext://sys.stdout", "ext://sys.stderr"):
        assert found(nixl_1p1d(engine="vllm", env={"VLLM_LOGGING_STREAM": ok})) == []


@pytest.mark.parametrize("name", ["VLLM_LOGGING_PREFIX", "VLLM_GC_DEBUG", "NCCL_DEBUG_SUBSYS"])
@pytest.mark.parametrize("value", ["ext://evil.mod", "cfg://x", "x.kv_connector_module_path"])
def test_any_setting_that_reads_as_code_is_refused(name: str, value: str) -> None:
    refused_env({name: value}, name, "reads as code")


@pytest.mark.parametrize(
    ("args", "index", "says"),
    [
        (["--structured-outputs-config", '{"reasoning_parser_plugin": "/tmp/p.py"}'], 1, "plugin"),
        (["--structured-outputs-config.reasoning_parser_plugin=/tmp/p.py"], 0, "plugin"),
        (["--structured-outputs-config.reasoning_parser_plugin", "/tmp/p.py"], 1, "plugin"),
        (["--profiler-config", '{"proton_hook": "evil.hook"}'], 1, "hook"),
        (["--hf-overrides", '{"a": {"worker_cls": "evil.W"}}'], 1, "cls"),
        (["--hf-overrides", '{"a": {"b": "evil.module.Class"}}'], 1, "reads as code"),
        (["--hf-overrides", '{"a": [{"hook_fn": "x"}]}'], 1, "hook"),
        (["--hf-overrides", '[{"worker_cls": "x"}]'], 1, "cls"),
        (["--kernel-config", '{"ir_op_priority": ["pkg.mod:fn"]}'], 1, "reads as code"),
        (["--spec-method", "custom_class"], 1, "loads code"),
        (["--spec-model", "evil.Proposer"], 1, "import path"),
        (["--worker-cls", "evil.W"], 0, "is code: "),
        (["--logits-processors", "evil.L"], 0, "is code: "),
        (["--logging-config", "{}"], 0, "is code: "),
    ],
)
def test_flags_that_load_code_are_refused_whatever_the_spelling(
    args: list[str], index: int, says: str
) -> None:
    body = nixl_1p1d(engine="vllm", extra_args=args)
    assert any(loc == ("extra_args", index) and says in m for loc, m in found(body)), found(body)


# Weak 5: host paths -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "HF_HOME",
        "HF_HUB_CACHE",
        "VLLM_ASSETS_CACHE",
        "VLLM_MEDIA_CACHE",
        "VLLM_DEBUG_DUMP_PATH",
        "NCCL_DEBUG_FILE",
        "UCX_LOG_FILE",
        "TORCH_LOGS_OUT",
        "VLLM_TUNED_CONFIG_FOLDER",
    ],
)
@pytest.mark.parametrize("value", ["/etc", "/tmp/x", f"{ROOT}/../etc", "relative", f"{ROOT}-x"])
def test_env_paths_outside_the_roots_are_refused(name: str, value: str) -> None:
    refused_env({name: value}, name, repr(value))


@pytest.mark.parametrize("name", ["VLLM_CACHE_ROOT", "HF_HOME", "NCCL_DEBUG_FILE"])
def test_env_paths_under_a_root_pass(name: str) -> None:
    assert found(nixl_1p1d(engine="vllm", env={name: f"{ROOT}/cache"})) == []


def test_an_unrecorded_profiler_dir_variable_is_refused() -> None:
    # VLLM_TORCH_PROFILER_DIR: gone from vLLM 0.32's list (--profiler-config took it over)
    refused_env({"VLLM_TORCH_PROFILER_DIR": "/tmp/p"}, "VLLM_TORCH_PROFILER_DIR", "not an engine")


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["--chat-template", "/etc/passwd"], 1),
        (["--chat-template=/etc/passwd"], 0),
        (["--chat-template", "/etc/{weird}"], 1),  # opened as a file first
        (["--chat-template", "relative.jinja"], 1),
        (["--ssl-keyfile", "/etc/shadow"], 1),
        (["--ssl-certfile", "/etc/ssl/x.pem"], 1),
        (["--ssl-ca-certs", "/etc/ssl/ca.pem"], 1),
        (["--download-dir", "/etc"], 1),
        (["--download_dir=/etc"], 0),
        (["--download-d", "/etc"], 1),  # an abbreviation is its flag
        (["--lora-modules", "x=/etc"], 1),
        (["--lora-modules", "a=" + ROOT, "x=/etc"], 2),
        (["--lora-modules", '{"name": "x", "path": "/etc"}'], 1),
        (["--default-mm-loras", '{"image": "/etc"}'], 1),
        (["--tokenizer", "/etc"], 1),
        (["--tokenizer", "../../etc"], 1),
        (["--hf-config-path", "/etc"], 1),
        (["--generation-config", "/etc"], 1),
        (["--mm-encoder-fp8-scale-save-path", "/etc/x"], 1),
        (["--profiler-config", '{"torch_profiler_dir": "/etc"}'], 1),
        (["--profiler-config.torch_profiler_dir=/etc"], 0),
        (["--compilation-config", '{"cache_dir": "/etc"}'], 0),  # refused as code first
    ],
)
def test_flags_reading_or_writing_host_paths_stay_under_the_roots(
    args: list[str], index: int
) -> None:
    body = nixl_1p1d(engine="vllm", extra_args=args)
    assert [loc for loc, _ in found(body)] == [("extra_args", index)], found(body)


@pytest.mark.parametrize(
    "args",
    [
        ["--chat-template", "{{ messages }}"],
        ["--chat-template", f"{ROOT}/chat.jinja"],
        ["--tokenizer", "Qwen/Qwen3-0.6B"],
        ["--generation-config", "vllm"],
        ["--download-dir", f"{ROOT}/weights"],
        ["--lora-modules", f"a={ROOT}/a", f'{{"name": "b", "path": "{ROOT}/b"}}'],
        [
            "--profiler-config",
            json.dumps({"torch_profiler_dir": f"{ROOT}/p", "delay_iterations": 1}),
        ],
        ["--hf-overrides", '{"rope_scaling": {"type": "yarn", "factor": 4}}'],
    ],
)
def test_settings_and_paths_under_the_roots_pass(args: list[str]) -> None:
    assert found(nixl_1p1d(engine="vllm", extra_args=args)) == []


def test_an_example_connectors_storage_path_stays_under_the_roots() -> None:
    body = nixl_1p1d(
        connector="ExampleConnector", kv_connector_extra_config={"shared_storage_path": "/etc"}
    )
    body = edited(body, ("groups", 1, "kv_connector_extra_config"), {"shared_storage_path": "/x"})
    assert [loc for loc, _ in found(body)] == [
        ("kv_connector_extra_config", "shared_storage_path"),
        ("groups", 1, "kv_connector_extra_config", "shared_storage_path"),
    ]
    ok = {"shared_storage_path": f"{ROOT}/kv"}
    assert found(nixl_1p1d(connector="ExampleConnector", kv_connector_extra_config=ok)) == []


def test_a_connector_setting_naming_a_class_is_code() -> None:
    # vLLM's KV offloading resolves a cache policy given as module.Class
    body = nixl_1p1d(kv_connector_extra_config={"policy": "evil.policies.Steal"})
    [(loc, msg)] = found(body)
    assert loc == ("kv_connector_extra_config", "policy") and "reads as code" in msg
    assert found(nixl_1p1d(kv_connector_extra_config={"backends": ["UCX"]})) == []


def test_an_encoder_caches_storage_path_stays_under_the_roots() -> None:
    body = epd_1e1p1d()
    body["ec_transfer"]["ec_connector_extra_config"]["shared_storage_path"] = "/etc"
    [(loc, msg)] = found(body)
    assert loc == ("ec_transfer", "ec_connector_extra_config", "shared_storage_path")
    assert "PDCTL_ENGINE_PATH_ROOTS" in msg


def test_a_link_inside_a_root_leading_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    reach = EngineReach(roots=(str(tmp_path),))
    body = nixl_1p1d(engine="vllm", extra_args=["--download-dir", f"{tmp_path}/out"])
    [(_, msg)] = found(body, reach)
    assert "leads through a link to '/etc'" in msg


# Weak 5: servers elsewhere ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"HF_ENDPOINT": "http://anywhere"}, "HF_ENDPOINT"),
        ({"S3_ENDPOINT_URL": "http://anywhere"}, "S3_ENDPOINT_URL"),
        ({"VLLM_USAGE_STATS_SERVER": "http://anywhere"}, "VLLM_USAGE_STATS_SERVER"),
    ],
)
def test_env_naming_a_server_elsewhere_is_refused(env: dict[str, str], name: str) -> None:
    refused_env(env, name, "is a server elsewhere: ")


@pytest.mark.parametrize(
    "args",
    [
        ["--otlp-traces-endpoint", "http://anywhere:4317"],
        ["--model-loader-extra-config", '{"tensorizer_uri": "s3://x/y"}'],
        ["--hf-overrides", '{"endpoint": "http://anywhere"}'],
    ],
)
def test_flags_naming_a_server_elsewhere_are_refused(args: list[str]) -> None:
    assert found(nixl_1p1d(engine="vllm", extra_args=args))


# Weak 5: listeners ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_P2P_SIDE_CHANNEL_HOST",
        "VLLM_EC_SIDE_CHANNEL_HOST",
        "VLLM_HOST_IP",
        "VLLM_DP_MASTER_IP",
        "VLLM_LOOPBACK_IP",
    ],
)
@pytest.mark.parametrize("value", ["0.0.0.0", "::", "*", "10.9.8.7"])
def test_env_listeners_only_on_the_bound_address(name: str, value: str) -> None:
    refused_env({name: value}, name, repr(value))


def test_nccls_bootstrap_listens_only_on_the_bound_address() -> None:
    refused_env({"NCCL_COMM_ID": "0.0.0.0:29500"}, "NCCL_COMM_ID", "every interface")
    assert found(nixl_1p1d(env={"NCCL_COMM_ID": "127.0.0.1:29500"})) == []


@pytest.mark.parametrize("value", ["127.0.0.1", "localhost"])
def test_env_listeners_on_loopback_pass(value: str) -> None:
    assert found(nixl_1p1d(env={"VLLM_NIXL_SIDE_CHANNEL_HOST": value})) == []


@pytest.mark.parametrize(
    ("args", "index", "says"),
    [
        (["--data-parallel-address", "0.0.0.0"], 1, "every interface"),
        (["--data-parallel-address=10.0.0.9"], 0, "not the instance's bound address"),
        (["--master-addr", "0.0.0.0"], 1, "every interface"),
        (["--kv-events-config", '{"enable_kv_cache_events": true}'], 1, "tcp://*:5557"),
        (["--kv-events-config", '{"publisher": "zmq"}'], 1, "every interface"),
        (
            ["--kv-events-config", '{"enable_kv_cache_events": true, "endpoint": "tcp://*:1"}'],
            1,
            "every interface",
        ),
        (
            [
                "--kv-events-config",
                json.dumps(
                    {
                        "enable_kv_cache_events": True,
                        "endpoint": "tcp://127.0.0.1:5557",
                        "replay_endpoint": "tcp://0.0.0.0:5558",
                    }
                ),
            ],
            1,
            "replay_endpoint",
        ),
        (["--kv-events-config", '{"publisher": "zmq", "endpoint": "ipc:///etc/x"}'], 1, "/etc/x"),
        (["--kv-events-config.endpoint=tcp://*:9"], 0, "as one value"),
        (["--kv-events-config", "zmq"], 1, "not a JSON object"),
    ],
)
def test_flag_listeners_only_on_the_bound_address(args: list[str], index: int, says: str) -> None:
    body = nixl_1p1d(engine="vllm", extra_args=args)
    assert any(loc == ("extra_args", index) and says in m for loc, m in found(body)), found(body)


@pytest.mark.parametrize(
    "args",
    [
        ["--data-parallel-address", "127.0.0.1"],
        ["--kv-events-config", '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:1"}'],
        ["--kv-events-config", '{"enable_kv_cache_events": false}'],
    ],
)
def test_flag_listeners_on_the_bound_address_pass(args: list[str]) -> None:
    assert found(nixl_1p1d(engine="vllm", extra_args=args)) == []


def test_on_a_node_the_listener_is_that_nodes_address() -> None:
    node = EngineReach(roots=(ROOT,), bound="10.0.0.5")
    body = nixl_1p1d(env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.5"})
    assert found(body, node) == []
    assert found(nixl_1p1d(env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"}), node)
