"""Deployment spec factories shared by the controller and web tests: plain dicts (API bodies)
and their DeploymentSpec. Each takes keyword overrides of top-level fields."""

from __future__ import annotations

import copy
from typing import Any

from controller.spec.deployment import DeploymentSpec


def nixl_1p1d(name: str = "pd", **over: Any) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [{"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"}],
        **over,
    }


def moriio_1p1d(name: str = "mori", tp: int = 2, mode: str = "write", **over: Any) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "qwen3-235b-a22b-fp8",
        "hardware": "mi300x",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": [
            {"name": "prefill", "role": "prefill", "tp": tp, "mode": mode},
            {"name": "decode", "role": "decode", "tp": tp, "mode": mode},
        ],
        **over,
    }


def colocated(name: str = "solo", count: int = 1, **over: Any) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "colocated",
        "groups": [{"name": "main", "role": "colocated", "count": count}],
        **over,
    }


def edited(body: dict, path: tuple, value: Any) -> dict:
    """A deep copy of `body` with the field at `path` set to `value`."""
    out = copy.deepcopy(body)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def spec(body: dict) -> DeploymentSpec:
    return DeploymentSpec.model_validate(body)


EC_STORE = "/tmp/pdctl-ec-test"


def epd_1e1p1d(name: str = "epd", **over: Any) -> dict:
    """Encode -> prefill -> decode on the multimodal stand-in profile
    (controller/spec/sections/encode.py)."""
    return {
        "name": name,
        "engine": "sim",
        "model": "qwen2.5-vl-7b-instruct",
        "hardware": "h100",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "encode", "role": "encode"},
            {"name": "prefill", "role": "prefill"},
            {"name": "decode", "role": "decode"},
        ],
        "ec_transfer": {
            "ec_connector": "ECExampleConnector",
            "ec_connector_extra_config": {"shared_storage_path": EC_STORE},
        },
        **over,
    }
