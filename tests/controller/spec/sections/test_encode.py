"""Encoder disaggregation in the spec (controller/spec/sections/encode.py): every broken rule
refused at its
field, and the rendered commands: ec_producer on encode instances, ec_consumer on prefill (or
colocated) ones, nothing on decode, for vllm and the stand-in alike."""

from __future__ import annotations

import json

import pytest

from controller.launch.ports import allocate
from controller.launch.process import LaunchSettings
from controller.launch.render import proxy_args, render
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from controller.spec.sections.encode import ec_transfer_config
from tests.specs import EC_STORE, colocated, edited, epd_1e1p1d, moriio_1p1d, spec

EC = {
    "ec_connector": "ECExampleConnector",
    "ec_connector_extra_config": {"shared_storage_path": EC_STORE},
}
ENCODE = {"name": "encode", "role": "encode"}
STORE_LOC = ("ec_transfer", "ec_connector_extra_config", "shared_storage_path")


def _without_ec() -> dict:
    body = epd_1e1p1d()
    del body["ec_transfer"]
    return body


BROKEN = {
    "encode group without ec_transfer": (
        _without_ec(),
        ("groups", 0, "role"),
        "needs ec_transfer",
    ),
    "ec_transfer without an encode group": (
        edited(epd_1e1p1d(), ("groups",), epd_1e1p1d()["groups"][1:]),
        ("ec_transfer",),
        "without an encode group",
    ),
    "unknown EC connector": (
        edited(epd_1e1p1d(), ("ec_transfer", "ec_connector"), "ECFooConnector"),
        ("ec_transfer", "ec_connector"),
        "unknown EC connector 'ECFooConnector'",
    ),
    "an EC connector the stand-in does not model": (
        edited(epd_1e1p1d(), ("ec_transfer", "ec_connector"), "ECMooncakeConnector"),
        ("ec_transfer", "ec_connector"),
        "models only ECExampleConnector",
    ),
    "ECExampleConnector without a storage path": (
        edited(epd_1e1p1d(), ("ec_transfer", "ec_connector_extra_config"), {}),
        STORE_LOC,
        "needs shared_storage_path",
    ),
    "a relative storage path": (
        edited(epd_1e1p1d(), STORE_LOC, "ec-cache"),
        STORE_LOC,
        "absolute path",
    ),
    "a storage path that climbs": (
        edited(epd_1e1p1d(), STORE_LOC, "/tmp/../etc"),
        STORE_LOC,
        "'..'",
    ),
    "a storage path that is not text": (
        edited(epd_1e1p1d(), STORE_LOC, 7),
        STORE_LOC,
        "absolute path",
    ),
    "a code-loading extra key": (
        edited(
            epd_1e1p1d(),
            ("ec_transfer", "ec_connector_extra_config"),
            {"shared_storage_path": EC_STORE, "ec_connector_module_path": "x.y"},
        ),
        ("ec_transfer", "ec_connector_extra_config", "ec_connector_module_path"),
        "",
    ),
    "an encode group with a KV mode": (
        edited(epd_1e1p1d(), ("groups", 0, "mode"), "read"),
        ("groups", 0, "mode"),
        "no read/write mode",
    ),
    "an encode group with KV connector settings": (
        edited(epd_1e1p1d(), ("groups", 0, "kv_connector_extra_config"), {"backends": ["UCX"]}),
        ("groups", 0, "kv_connector_extra_config"),
        "no KV connector to configure",
    ),
    "a text-only model": (
        epd_1e1p1d(model="qwen2.5-7b-instruct"),
        ("model",),
        "has no vision encoder",
    ),
    "encoders and only a decode": (
        edited(epd_1e1p1d(), ("groups",), [ENCODE, {"name": "decode", "role": "decode"}]),
        ("groups",),
        "prefill or colocated group to feed",
    ),
    "a colocated deployment of encoders alone": (
        colocated(model="qwen2.5-vl-7b-instruct", groups=[ENCODE], ec_transfer=EC, hardware="h100"),
        ("groups",),
        "prefill or colocated group to feed",
    ),
}


@pytest.mark.parametrize(("body", "loc", "phrase"), BROKEN.values(), ids=BROKEN.keys())
def test_each_broken_rule_is_refused_at_its_field(body: dict, loc: tuple, phrase: str) -> None:
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == loc, err.value.message
    assert phrase in err.value.message


def test_vllm_takes_every_connector_vllm_has_and_any_model_it_may_know() -> None:
    for connector in ("ECExampleConnector", "ECCPUConnector", "ECMooncakeConnector"):
        body = edited(epd_1e1p1d(engine="vllm"), ("ec_transfer", "ec_connector"), connector)
        check(spec(body))
    check(spec(epd_1e1p1d(engine="vllm", model="/models/some-vl-model")))


def test_e_plus_pd_and_epd_under_moriio_are_valid() -> None:
    check(
        spec(
            colocated(
                model="qwen2.5-vl-7b-instruct",
                hardware="h100",
                groups=[ENCODE, {"name": "main", "role": "colocated"}],
                ec_transfer=EC,
            )
        )
    )
    body = moriio_1p1d(model="qwen2.5-vl-7b-instruct", ec_transfer=EC)
    body["groups"].insert(0, ENCODE)
    check(spec(body))


def _argv_config(argv: list[str], flag: str) -> dict | None:
    return json.loads(argv[argv.index(flag) + 1]) if flag in argv else None


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_encode_produces_prefill_consumes_decode_sees_no_ec(engine: str) -> None:
    epd = spec(epd_1e1p1d(engine=engine))
    check(epd)
    settings = LaunchSettings()
    launches = {launch.name: launch for launch in render(epd, allocate(epd), settings)}
    encode, prefill, decode = launches["encode-0"], launches["prefill-0"], launches["decode-0"]
    extra = {"shared_storage_path": EC_STORE}
    assert _argv_config(encode.argv, "--ec-transfer-config") == {
        "ec_connector": "ECExampleConnector",
        "ec_role": "ec_producer",
        "ec_connector_extra_config": extra,
    }
    assert _argv_config(prefill.argv, "--ec-transfer-config") == {
        "ec_connector": "ECExampleConnector",
        "ec_role": "ec_consumer",
        "ec_connector_extra_config": extra,
    }
    assert "--ec-transfer-config" not in decode.argv
    # The encoder moves no KV, and runs without prefix caching (vLLM's example; vLLM 0.32
    # turns it off on an encoder-only instance anyway).
    assert "--kv-transfer-config" not in encode.argv
    assert "--no-enable-prefix-caching" in encode.argv
    assert _argv_config(prefill.argv, "--kv-transfer-config")["kv_connector"] == "NixlConnector"
    assert encode.role == "encode" and not encode.registers
    # The operator's command is the vllm serve line either way.
    assert "--ec-transfer-config" in encode.command and encode.command.startswith("vllm serve")
    if engine == "sim":
        assert encode.argv[encode.argv.index("sim") + 1] == "qwen2.5-vl-7b-instruct"


def test_the_proxy_is_told_the_encoders() -> None:
    epd = spec(epd_1e1p1d())
    ports = allocate(epd)
    args = proxy_args(epd, ports, LaunchSettings())
    assert (
        args[args.index("--encode") + 1] == f"http://127.0.0.1:{ports.instances['encode-0'].http}"
    )
    assert args.count("--prefill") == args.count("--decode") == args.count("--encode") == 1


def test_encoders_are_named_to_a_moriio_proxy_which_hears_of_the_rest_by_registration() -> None:
    body = moriio_1p1d(model="qwen2.5-vl-7b-instruct", ec_transfer=EC)
    body["groups"].insert(0, ENCODE)
    mori = spec(body)
    args = proxy_args(mori, allocate(mori), LaunchSettings())
    assert args.count("--encode") == 1 and "--prefill" not in args


def test_no_ec_transfer_renders_no_ec_config() -> None:
    plain = spec(colocated())
    assert ec_transfer_config(plain, plain.groups[0]) is None


def test_extra_args_may_not_set_the_ec_config() -> None:
    body = edited(epd_1e1p1d(), ("extra_args",), ["--ec-transfer-config", "{}"])
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == ("extra_args", 0)


def test_compose_and_kubernetes_render_the_encoders_too() -> None:
    from controller.manifests.compose import render_compose
    from controller.manifests.k8s import K8sSettings, render_k8s

    epd = spec(epd_1e1p1d(engine="vllm", model="Qwen/Qwen2.5-VL-7B-Instruct"))
    check(epd)
    services = render_compose(epd, allocate(epd))["services"]
    assert "--ec-transfer-config" in services["encode-0"]["command"]
    docs = render_k8s(epd, allocate(epd), K8sSettings())
    labels = [d["metadata"].get("labels", {}).get("llm-d.ai/role") for d in docs]
    assert "encode" in labels
    body = moriio_1p1d(model="Qwen/Qwen2.5-VL-7B-Instruct", engine="vllm", ec_transfer=EC)
    body["groups"].insert(0, ENCODE)
    mori = spec(body)
    check(mori)
    docs = render_k8s(mori, allocate(mori), K8sSettings())
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert "encode" not in json.dumps(policy)  # encoders never register over ZMQ
