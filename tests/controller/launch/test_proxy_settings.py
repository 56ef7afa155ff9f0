"""A deployment's proxy settings, one model all the way: spec -> ProxySettings -> argv ->
`pdctl proxy`'s options -> the same ProxySettings."""

import json

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from connector import flags
from connector.settings import ProxySettings
from controller.launch.placement import Addresses
from controller.launch.ports import allocate
from controller.launch.process import LaunchSettings
from controller.launch.render import proxy_args, proxy_settings
from controller.spec.deployment import PROXY_PLACE, ProxyConfig
from harness.processes import ROOT
from tests.specs import colocated, epd_1e1p1d, moriio_1p1d, nixl_1p1d, spec

TUNED = {
    "policy": "least-tokens",
    "hold_queue": 12,
    "hold_deadline_s": 2.5,
    "prefill_timeout_s": 7,
    "decode_timeout_s": 8.5,
    "first_byte_timeout_s": 3,
    "retry_attempts": 2,
    "retry_deadline_s": 11,
    "retry_budget_ratio": 0.1,
    "eject_max_share": 1,
}
BIDIR = {"bidirectional_kv_xfer": True, "decoder_kv_blocks_ttl": 90}
SPECS = {
    "nixl": nixl_1p1d(),
    "nixl-tuned": nixl_1p1d(proxy=TUNED, slo={"ttft_ms": None, "tpot_ms": 15, "itl_stat": "max"}),
    "nixl-bidir": nixl_1p1d(kv_connector_extra_config=BIDIR),
    "nixl-roles": nixl_1p1d(
        groups=[
            {"name": "prefill", "role": "prefill", "count": 2},
            {"name": "decode", "role": "decode"},
        ],
        role_switch={"serving": {"prefill-1": "decode"}},
    ),
    "moriio": moriio_1p1d(proxy=TUNED),
    "colocated": colocated(count=2),
    "epd": epd_1e1p1d(),
    "render": nixl_1p1d(groups=[*nixl_1p1d()["groups"], {"name": "render", "role": "render"}]),
    "blog": json.loads((ROOT / "deploy" / "mori-blog.json").read_text()),
}
LAUNCHING = LaunchSettings(bind_host="0.0.0.0", registry_allow=("any",))


def parsed(argv: list[str]) -> ProxySettings:
    """What `pdctl proxy` makes of argv (its options, generated from the model)."""
    got: list[ProxySettings] = []
    app = typer.Typer()
    app.command()(flags.command(got.append))
    unset = {
        name: None for name in ("PDCTL_ADMIN_TOKEN", "PDCTL_RUNTIME_DIR", "PDCTL_REGISTRY_EXPECTED")
    }
    result = CliRunner().invoke(app, argv, env=unset)
    assert result.exit_code == 0, result.output
    return got[0]


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("launching", [LaunchSettings(), LAUNCHING])
def test_spec_to_argv_to_cli_gives_the_same_settings(name: str, launching: LaunchSettings):
    deployment = spec(SPECS[name])
    ports = allocate(deployment)
    settings = proxy_settings(deployment, ports, launching, Addresses(launching.host))
    argv = proxy_args(deployment, ports, launching)
    assert argv[0] == "proxy" and argv[1:] == flags.argv(settings)
    assert parsed(argv[1:]) == settings


def test_the_spec_section_sets_the_proxys_fields_by_their_names():
    proxy_fields = set(ProxySettings.model_fields)
    for name in set(ProxyConfig.model_fields) - PROXY_PLACE:
        assert name.removesuffix("_s") in proxy_fields, name
    tuned = ProxyConfig.model_validate(TUNED).proxy_settings()
    assert tuned["hold_deadline"] == 2.5 and tuned["first_byte_timeout"] == 3
    assert ProxyConfig().proxy_settings() == {
        "policy": "round-robin",
        "hold_queue": 256,
        "hold_deadline": 30.0,
    }  # the rest left to the proxy


def test_the_spec_takes_the_proxys_defaults_and_bounds():
    config, proxy = ProxyConfig(), ProxySettings(port=0)
    assert (config.policy, config.hold_queue, config.hold_deadline_s) == (
        proxy.policy, proxy.hold_queue, proxy.hold_deadline
    )  # fmt: skip
    for field, value in (("retry_attempts", 11), ("eject_max_share", 0), ("policy", "random")):
        with pytest.raises(ValidationError) as err:
            ProxyConfig.model_validate({field: value})
        assert err.value.errors()[0]["loc"] == (field,)
    with pytest.raises(ValidationError):  # a spec bounds the hold queue more tightly
        ProxyConfig(hold_queue=100_001)
    ProxySettings(port=0, hold_queue=100_001)
