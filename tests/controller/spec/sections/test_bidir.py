"""Bidirectional KV in the spec: NIXL only, a boolean, a sane TTL, one setting for every
prefill and decode group; refused at the key (a 422 naming it, through the API too)."""

from __future__ import annotations

import json

import pytest

from controller.launch.ports import allocate
from controller.launch.process import LaunchSettings
from controller.launch.render import proxy_args, render
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from controller.spec.sections.bidir import DEFAULT_TTL_S, Bidirectional, bidirectional
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec

ON = {"bidirectional_kv_xfer": True}
KEY = "bidirectional_kv_xfer"

BROKEN = {
    "MoRIIO": (
        moriio_1p1d(kv_connector_extra_config=ON),
        ("kv_connector_extra_config", KEY),
        "MoRIIOConnector has no such transfer",
    ),
    "another connector": (
        nixl_1p1d(connector="LMCacheConnectorV1", kv_connector_extra_config=ON),
        ("kv_connector_extra_config", KEY),
        "NIXL's",
    ),
    "colocated": (
        colocated(kv_connector_extra_config=ON),
        ("kv_connector_extra_config", KEY),
        "colocated deployment",
    ),
    "colocated group": (
        edited(colocated(), ("groups", 0, "kv_connector_extra_config"), ON),
        ("groups", 0, "kv_connector_extra_config", KEY),
        "colocated deployment",
    ),
    "not a boolean": (
        nixl_1p1d(kv_connector_extra_config={KEY: "yes"}),
        ("kv_connector_extra_config", KEY),
        "true or false",
    ),
    "ttl zero": (
        nixl_1p1d(kv_connector_extra_config={**ON, "decoder_kv_blocks_ttl": 0}),
        ("kv_connector_extra_config", "decoder_kv_blocks_ttl"),
        "above 0",
    ),
    "ttl a string": (
        nixl_1p1d(kv_connector_extra_config={**ON, "decoder_kv_blocks_ttl": "60"}),
        ("kv_connector_extra_config", "decoder_kv_blocks_ttl"),
        "number of seconds",
    ),
    "ttl a boolean": (
        nixl_1p1d(kv_connector_extra_config={**ON, "decoder_kv_blocks_ttl": True}),
        ("kv_connector_extra_config", "decoder_kv_blocks_ttl"),
        "number of seconds",
    ),
    "ttl past a day": (
        nixl_1p1d(kv_connector_extra_config={**ON, "decoder_kv_blocks_ttl": 86_401}),
        ("kv_connector_extra_config", "decoder_kv_blocks_ttl"),
        "at most",
    ),
    "only the decode group": (
        edited(nixl_1p1d(), ("groups", 1, "kv_connector_extra_config"), ON),
        ("groups", 1, "kv_connector_extra_config", KEY),
        "same for every prefill and decode group",
    ),
    "groups with different TTLs": (
        edited(
            nixl_1p1d(kv_connector_extra_config=ON),
            ("groups", 0, "kv_connector_extra_config"),
            {"decoder_kv_blocks_ttl": 30},
        ),
        ("groups", 0, "kv_connector_extra_config", KEY),
        "same for every",
    ),
}


@pytest.mark.parametrize(("body", "loc", "phrase"), BROKEN.values(), ids=BROKEN.keys())
def test_each_broken_rule_is_refused_at_its_key(body: dict, loc: tuple, phrase: str) -> None:
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == loc
    assert phrase in err.value.message


def test_nixl_may_turn_it_on_and_the_proxy_is_told() -> None:
    on = spec(nixl_1p1d(kv_connector_extra_config={**ON, "decoder_kv_blocks_ttl": 90}))
    check(on)
    assert bidirectional(on) == Bidirectional(True, 90.0)
    off = spec(nixl_1p1d(kv_connector_extra_config={KEY: False}))
    check(off)
    assert bidirectional(off) == Bidirectional(False, DEFAULT_TTL_S)
    assert bidirectional(spec(colocated())) == Bidirectional()


def test_the_same_setting_in_every_group_is_fine() -> None:
    body = nixl_1p1d()
    for i in (0, 1):
        body = edited(body, ("groups", i, "kv_connector_extra_config"), ON)
    check(spec(body))
    assert bidirectional(spec(body)).enabled


def test_the_rendered_proxy_and_engines_carry_it() -> None:
    on = spec(nixl_1p1d(kv_connector_extra_config=ON))
    settings = LaunchSettings()
    ports = allocate(on)
    args = proxy_args(on, ports, settings)
    assert args[args.index("--bidirectional-kv") + 1 : args.index("--bidirectional-kv") + 3] == [
        "--kv-blocks-ttl",
        "480",
    ]
    launches = render(on, ports, settings)
    engines = [launch for launch in launches if "--kv-transfer-config" in launch.argv]
    assert len(engines) == 2
    for launch in engines:
        config = json.loads(launch.argv[launch.argv.index("--kv-transfer-config") + 1])
        assert config["kv_connector_extra_config"] == ON
    off = spec(nixl_1p1d())
    assert "--bidirectional-kv" not in proxy_args(off, allocate(off), settings)
