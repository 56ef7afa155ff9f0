"""DeploymentSpec shapes and the cross-field rules of controller.spec.rules.check."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.spec.field_error import FieldError
from controller.spec.rules import check
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec

# (body, loc of the error, a phrase of its message): one case per rule of check().
BROKEN = {
    "disaggregated without connector": (
        nixl_1p1d(connector=None),
        ("connector",),
        "needs a KV connector",
    ),
    "unknown connector": (
        nixl_1p1d(connector="FooConnector"),
        ("connector",),
        "unknown connector 'FooConnector'",
    ),
    "colocated with connector": (
        colocated(connector="NixlConnector"),
        ("connector",),
        "leave connector unset",
    ),
    "moriio with prefix caching": (
        moriio_1p1d(prefix_caching=True),
        ("prefix_caching",),
        "prefix_caching_override_reason",
    ),
    "group name twice": (
        edited(nixl_1p1d(), ("groups", 1, "name"), "prefill"),
        ("groups", 0, "name"),
        "used twice",
    ),
    "prefill in colocated": (
        edited(colocated(), ("groups", 0, "role"), "prefill"),
        ("groups", 0, "role"),
        "only colocated groups",
    ),
    "colocated in disaggregated": (
        edited(nixl_1p1d(), ("groups", 0, "role"), "colocated"),
        ("groups", 0, "role"),
        "prefill and decode groups",
    ),
    "mode without modes": (
        edited(nixl_1p1d(), ("groups", 0, "mode"), "read"),
        ("groups", 0, "mode"),
        "NixlConnector has no read/write modes",
    ),
    "moriio without mode": (
        edited(moriio_1p1d(), ("groups", 0, "mode"), None),
        ("groups", 0, "mode"),
        "need a mode",
    ),
    "ports for some instances": (
        edited(colocated(count=2), ("groups", 0, "ports"), [{"http": 21000}]),
        ("groups", 0, "ports"),
        "give ports for all 2",
    ),
    "no decode group": (
        edited(nixl_1p1d(), ("groups", 1, "role"), "prefill"),
        ("groups",),
        "at least one prefill group and one decode group",
    ),
    "mode without pair": (
        edited(
            edited(moriio_1p1d(), ("groups", 0, "mode"), "read"),
            ("groups",),
            moriio_1p1d()["groups"] + [{"name": "p2", "role": "prefill", "tp": 2, "mode": "read"}],
        ),
        ("groups",),
        "has no prefill/decode pair",
    ),
    "gpus not tp x count": (
        edited(moriio_1p1d(), ("groups", 0, "gpus"), [0, 1, 2]),
        ("groups", 0, "gpus"),
        "need 2 GPU ids, got 3",
    ),
    "gpu shared": (
        edited(edited(moriio_1p1d(), ("groups", 0, "gpus"), [0, 1]), ("groups", 1, "gpus"), [1, 2]),
        ("groups", 1, "gpus"),
        "GPU 1 is given to both prefill-0 and decode-0",
    ),
    "port twice": (
        edited(
            edited(nixl_1p1d(), ("groups", 0, "ports"), [{"http": 21000}]),
            ("groups", 1, "ports"),
            [{"http": 21000}],
        ),
        ("groups", 1, "ports", 0, "http"),
        "port 21000 (decode-0 HTTP) is also",
    ),
    "rank offset overlap": (
        edited(
            edited(moriio_1p1d(), ("groups", 0, "ports"), [{"handshake": 21000}]),
            ("groups", 1, "ports"),
            [{"notify": 21001}],
        ),
        ("groups", 1, "ports", 0, "notify"),
        "port 21001 (decode-0 notify) is also prefill-0 handshake",
    ),
    "owned flag": (nixl_1p1d(extra_args=["--port=9"]), ("extra_args", 0), "--port is set by pdctl"),
    "owned flag in group": (
        edited(nixl_1p1d(), ("groups", 1, "extra_args"), ["--enforce-eager", "-tp"]),
        ("groups", 1, "extra_args", 1),
        "-tp is set by pdctl",
    ),
    "module path": (
        nixl_1p1d(extra_args=['--kv-x={"kv_connector_module_path":"m"}']),
        ("extra_args", 0),
        "kv_connector_module_path loads arbitrary code",
    ),
    "newline in arg": (nixl_1p1d(extra_args=["--x\n--y"]), ("extra_args", 0), "newlines"),
    "owned flag behind a dotted key": (
        nixl_1p1d(extra_args=["--kv-transfer-config.kv_role=kv_both"]),
        ("extra_args", 0),
        "--kv-transfer-config.kv_role is set by pdctl",
    ),
    "kv extra config without connector": (
        colocated(kv_connector_extra_config={"a": "1"}),
        ("kv_connector_extra_config",),
        "no KV connector",
    ),
    "kv extra config owned by pdctl": (
        moriio_1p1d(kv_connector_extra_config={"notify_port": "1"}),
        ("kv_connector_extra_config", "notify_port"),
        "set by pdctl",
    ),
    "kv extra config module path": (
        nixl_1p1d(kv_connector_extra_config={"kv_connector_module_path": "m"}),
        ("kv_connector_extra_config", "kv_connector_module_path"),
        "names code to load",
    ),
    "kv extra config class": (
        nixl_1p1d(kv_connector_extra_config={"Detector_Cls": "evil.D"}),
        ("kv_connector_extra_config", "Detector_Cls"),
        "names code to load ('cls'",
    ),
    "group kv extra config in a colocated deployment": (
        edited(colocated(), ("groups", 0, "kv_connector_extra_config"), {"a": "1"}),
        ("groups", 0, "kv_connector_extra_config"),
        "no connector to set",
    ),
    "group kv extra config module path": (
        edited(nixl_1p1d(), ("groups", 1, "kv_connector_extra_config"), {"x_module": "m"}),
        ("groups", 1, "kv_connector_extra_config", "x_module"),
        "names code to load",
    ),
    "group kv extra config owned by pdctl": (
        edited(moriio_1p1d(), ("groups", 0, "kv_connector_extra_config"), {"read_mode": "t"}),
        ("groups", 0, "kv_connector_extra_config", "read_mode"),
        "set by pdctl",
    ),
}


@pytest.mark.parametrize(("body", "loc", "phrase"), BROKEN.values(), ids=BROKEN.keys())
def test_check_names_the_field_of_each_broken_rule(body: dict, loc: tuple, phrase: str) -> None:
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == loc
    assert phrase in err.value.message


@pytest.mark.parametrize(
    "body",
    [
        nixl_1p1d(),
        moriio_1p1d(),
        colocated(count=3),
        moriio_1p1d(prefix_caching=True, prefix_caching_override_reason="measured"),
    ],
)
def test_check_passes_sound_specs(body: dict) -> None:
    check(spec(body))


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (nixl_1p1d(name="Bad_Name"), ("name",)),
        (nixl_1p1d(name="a" * 41), ("name",)),
        (nixl_1p1d(engine="tgi"), ("engine",)),
        (nixl_1p1d(groups=[]), ("groups",)),
        (nixl_1p1d(surprise=1), ("surprise",)),
        (edited(nixl_1p1d(), ("groups", 0, "tp"), 0), ("groups", 0, "tp")),
        (
            edited(nixl_1p1d(), ("groups", 0, "ports"), [{"http": 70000}]),
            ("groups", 0, "ports", 0, "http"),
        ),
    ],
)
def test_field_shapes_are_pydantic_errors_at_the_field(body: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as err:
        spec(body)
    assert err.value.errors()[0]["loc"] == loc


@pytest.mark.parametrize(
    "model",
    ["--host=0.0.0.0", "-x", "tiny model", "tiny\nmodel", "tiny\x00", "tiny\tx", "a\u2028b"],
)
def test_a_model_name_that_could_become_a_flag_or_split_is_refused(model: str) -> None:
    with pytest.raises(ValidationError) as err:
        spec(nixl_1p1d(model=model))
    [error] = err.value.errors()
    assert error["loc"] == ("model",)
    assert "a model name may not" in error["msg"]


@pytest.mark.parametrize("model", ["tiny", "meta-llama/Llama-3.1-8B-Instruct", "/models/x-1.5"])
def test_model_names_and_paths_pass(model: str) -> None:
    assert spec(nixl_1p1d(model=model)).model == model


INF = float("inf")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("slo", "ttft_ms"), INF),
        (("slo", "itl_ms"), float("nan")),
        (("slo", "tpot_ms"), -INF),
        (("slo", "ttft_ms"), 1e12),
        (("time_scale",), INF),
        (("proxy", "hold_deadline_s"), INF),
        (("proxy", "decode_timeout_s"), float("nan")),
        (("kv_connector_extra_config", "ratio"), INF),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_refused_at_the_field(
    path: tuple, value: float
) -> None:
    body = nixl_1p1d(slo={}, proxy={}, kv_connector_extra_config={})
    with pytest.raises(ValidationError) as err:
        spec(edited(body, path, value))
    assert err.value.errors()[0]["loc"][: len(path)] == path


def test_finite_numbers_in_range_pass() -> None:
    body = nixl_1p1d(
        slo={"ttft_ms": 3_600_000, "itl_ms": 0.5},
        kv_connector_extra_config={"ratio": 0.25, "size": 1 << 40, "on": True, "n": "x"},
    )
    parsed = spec(body)
    assert parsed.slo.ttft_ms == 3_600_000
    assert parsed.kv_connector_extra_config == {
        "ratio": 0.25,
        "size": 1 << 40,
        "on": True,
        "n": "x",
    }


def test_a_group_mode_is_read_or_write_never_colocated():
    import pytest as _pytest

    from controller.spec.deployment import DeploymentSpec
    from controller.spec.field_error import FieldError
    from controller.spec.rules import check

    spec = DeploymentSpec.model_validate(
        {
            "name": "m",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "MoRIIOConnector",
            "prefix_caching": False,
            "groups": [
                {"name": "p", "role": "prefill", "mode": "colocated"},
                {"name": "d", "role": "decode", "mode": "read"},
            ],
        }
    )
    with _pytest.raises(FieldError) as err:
        check(spec)
    assert err.value.loc == ("groups", 0, "mode")


def test_the_spec_speaks_the_domain_s_words():
    from controller.spec import deployment
    from domain import modes

    assert deployment.Role is modes.Role and deployment.Mode is modes.Mode
    assert set(deployment.CONNECTORS) == {c.value for c in modes.Connector}


@pytest.mark.parametrize(
    "field,value",
    [
        ("retry_attempts", 0),
        ("retry_deadline_s", 0),
        ("retry_budget_ratio", 1.5),
        ("eject_max_share", 0),
        ("first_byte_timeout_s", -1),
    ],
)
def test_proxy_retry_settings_out_of_range_name_the_field(field: str, value: float) -> None:
    body = nixl_1p1d(proxy={field: value})
    with pytest.raises(ValidationError) as err:
        spec(body)
    assert err.value.errors()[0]["loc"] == ("proxy", field)


@pytest.mark.parametrize(
    ("canary", "phrase"),
    [
        ({"interval_s": 0.5}, "must be 0 (off) or at least 1 s"),
        ({"interval_s": -1}, "greater than or equal to 0"),
        ({"interval_s": 86_401}, "less than or equal to 86400"),
        ({"interval_s": float("nan")}, "finite"),
        ({"max_tokens": 0}, "greater than or equal to 1"),
        ({"max_tokens": 257}, "less than or equal to 256"),
        ({"period": 30}, "Extra inputs"),
    ],
)
def test_the_canary_section_is_refused_at_its_field(canary: dict, phrase: str) -> None:
    from controller.spec.deployment import DeploymentSpec

    body = {**nixl_1p1d(), "canary": canary}
    with pytest.raises(ValidationError) as err:
        DeploymentSpec.model_validate(body)
    error = err.value.errors()[0]
    assert error["loc"][0] == "canary" and phrase in error["msg"], error


def test_the_canary_defaults_to_every_30_s_and_0_turns_it_off() -> None:
    from controller.spec.deployment import DeploymentSpec

    body = nixl_1p1d()
    assert DeploymentSpec.model_validate(body).canary.interval_s == 30
    off = DeploymentSpec.model_validate({**body, "canary": {"interval_s": 0}})
    assert off.canary.interval_s == 0 and off.canary.max_tokens == 16
