"""The rendered commands of an encode -> prefill -> decode deployment, read by vLLM's own
`vllm serve` parser (vLLM 0.32's CPU build in the vLLM venv). No multimodal model can be had
offline here, so nothing is served: every rendered argv must parse, its --ec-transfer-config
must become vLLM's ECTransferConfig with the role we meant (producer = encoder-only,
consumer), naming a connector vLLM's factory registers, and decode must carry none."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from controller.launch.ports import allocate
from controller.launch.process import VLLM_SERVE, LaunchSettings
from controller.launch.render import render
from controller.spec.deployment import DeploymentSpec
from controller.spec.rules import check
from tests.specs import colocated, epd_1e1p1d, moriio_1p1d
from tests.vllm import harness

pytestmark = pytest.mark.vllm

# Runs inside the vLLM venv: argv[1] is a JSON list of argv lists (after `vllm serve`).
PROBE = """
import json, sys
from vllm.distributed.ec_transfer.ec_connector.factory import ECConnectorFactory
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = ServeSubcommand().subparser_init(FlexibleArgumentParser(prog="vllm").add_subparsers())
out = []
for argv in json.loads(sys.argv[1]):
    ns = parser.parse_args(argv)
    ec, kv = ns.ec_transfer_config, ns.kv_transfer_config
    out.append({
        "model": ns.model_tag,
        "port": ns.port,
        "prefix_caching": ns.enable_prefix_caching,
        "kv_connector": kv.kv_connector if kv is not None else None,
        "ec": None if ec is None else {
            "ec_connector": ec.ec_connector,
            "ec_role": ec.ec_role,
            "extra": ec.ec_connector_extra_config,
            "encode_only": ec.is_encode_only,
            "consumer": ec.is_ec_consumer,
            "registered": ec.ec_connector in ECConnectorFactory._registry,
        },
    })
print(json.dumps(out))
"""


def _parsed(python, launches) -> dict[str, dict]:
    argvs = []
    for launch in launches:
        argv = shlex.split(launch.command)
        assert argv[: len(VLLM_SERVE)] == list(VLLM_SERVE)
        argvs.append(argv[len(VLLM_SERVE) :])
    done = subprocess.run(
        [str(python), "-c", PROBE, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return {launch.name: answer for launch, answer in zip(launches, answers, strict=True)}


def _engines(body: dict) -> list:
    spec = DeploymentSpec.model_validate(body)
    check(spec)
    return [launch for launch in render(spec, allocate(spec), LaunchSettings()) if launch.role]


def test_vllms_parser_reads_every_epd_command_as_we_meant_it():
    python = harness.vllm_python()
    if not python.exists():
        pytest.skip(f"no vLLM venv ({python}): run `make test-vllm`")
    model = "Qwen/Qwen2.5-VL-7B-Instruct"
    epd = epd_1e1p1d(engine="vllm", model=model)
    epd["groups"][0]["count"] = 2
    mori = moriio_1p1d(model=model, engine="vllm", ec_transfer=epd["ec_transfer"])
    mori["groups"].insert(0, {"name": "encode", "role": "encode"})
    e_pd = colocated(
        name="e-pd",
        engine="vllm",
        model=model,
        ec_transfer=epd["ec_transfer"],
        groups=[{"name": "encode", "role": "encode"}, {"name": "main", "role": "colocated"}],
    )
    launches = _engines(epd) + [
        launch for launch in _engines({**mori, "name": "mori-epd"}) if launch.role == "encode"
    ]
    launches += [launch for launch in _engines(e_pd) if launch.role == "colocated"]
    parsed = _parsed(python, launches)
    extra = epd["ec_transfer"]["ec_connector_extra_config"]
    for launch in launches:
        got = parsed[launch.name]
        assert got["model"] == model and got["port"] == launch.http_port, got
        ec = got["ec"]
        if launch.role == "encode":
            assert ec is not None and ec["ec_role"] == "ec_producer", got
            assert ec["encode_only"] and not ec["consumer"], got
            assert got["kv_connector"] is None and got["prefix_caching"] is False, got
        elif launch.role == "colocated":  # E + PD: the one language-model instance consumes
            assert ec is not None and ec["ec_role"] == "ec_consumer" and ec["consumer"], got
            assert got["kv_connector"] is None, got
        elif launch.role == "prefill":
            assert ec is not None and ec["ec_role"] == "ec_consumer" and ec["consumer"], got
            assert not ec["encode_only"] and got["kv_connector"] == "NixlConnector", got
        else:
            assert launch.role == "decode" and ec is None, got
            assert got["kv_connector"] == "NixlConnector", got
        if ec is not None:
            assert ec["ec_connector"] == "ECExampleConnector" and ec["registered"], got
            assert ec["extra"] == extra, got
    assert sum(launch.role == "encode" for launch in launches) == 3


# Runs inside the vLLM venv: argv[1] is a JSON list of argv lists; each becomes vLLM's whole
# engine config (model config, parallel, cache, KV and EC transfer) as `vllm serve` builds it.
BUILD = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = ServeSubcommand().subparser_init(FlexibleArgumentParser(prog="vllm").add_subparsers())
out = []
for argv in json.loads(sys.argv[1]):
    ns = parser.parse_args(argv)
    ns.model = ns.model_tag
    try:
        config = EngineArgs.from_cli_args(ns).create_engine_config()
        out.append({"ec_role": config.ec_transfer_config.ec_role,
                    "encoder_only": config.is_mm_encoder_only})
    except Exception as exc:
        out.append({"error": str(exc)})
print(json.dumps(out))
"""


def test_on_the_cpu_build_a_consumer_builds_and_a_text_only_encoder_is_refused_as_we_refuse():
    """The tiny Llama is text-only: vLLM builds the rendered prefill (ec_consumer and NIXL) in
    full, and refuses the rendered encoder with the reason controller/spec/sections/encode.py gives
    at
    `model` for a text-only profile."""
    python, model = harness.vllm_python(), harness.tiny_model()
    if not python.exists() or not (model / "config.json").exists():
        pytest.skip(f"no vLLM venv ({python}) or tiny model ({model}): run `make test-vllm`")
    body = epd_1e1p1d(engine="vllm", model=str(model))
    launches = {launch.role: launch for launch in _engines(body)}
    argvs = [shlex.split(launches[role].command)[2:] for role in ("prefill", "encode")]
    done = subprocess.run(
        [str(python), "-c", BUILD, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    prefill, encode = json.loads(done.stdout.strip().splitlines()[-1])
    assert prefill == {"ec_role": "ec_consumer", "encoder_only": False}, prefill
    assert "An EC producer-only instance requires a multimodal model" in encode["error"], encode
