"""`--ec-transfer-config` for the stand-in: vLLM's JSON (vllm/config/ec_transfer.py), read
with vLLM's rules (ec_role required with ec_connector; ec_producer | ec_consumer | ec_both),
of which the stand-in carries ECExampleConnector: one file per image hash under
shared_storage_path (simulator/ec_store.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from domain import profiles
from simulator.config.engine import EngineConfigError

EC_ROLES = ("ec_producer", "ec_consumer", "ec_both")
SIM_CONNECTORS = ("ECExampleConnector",)
DEFAULT_STORAGE = "/tmp"  # ECExampleConnector's own default


class EcConfigError(EngineConfigError):
    """An --ec-transfer-config vLLM (or the stand-in) would refuse; the message says why."""


@dataclass(frozen=True, slots=True)
class EcSettings:
    connector: str
    role: str
    storage_path: str = DEFAULT_STORAGE

    @property
    def producer(self) -> bool:
        return self.role in ("ec_producer", "ec_both")

    @property
    def consumer(self) -> bool:
        return self.role in ("ec_consumer", "ec_both")

    @property
    def encode_only(self) -> bool:
        """vLLM 0.32 runs a producer that is not also a consumer encoder-only: no language
        model, no KV cache (VllmConfig._resolve_mm_encoder_only)."""
        return self.producer and not self.consumer


def parse_ec_transfer_config(text: str | None) -> EcSettings | None:
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EcConfigError(f"--ec-transfer-config is not JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise EcConfigError("--ec-transfer-config must be a JSON object")
    connector, role = raw.get("ec_connector"), raw.get("ec_role")
    if connector is None:
        return None  # vLLM: no connector, no EC transfer
    if role not in EC_ROLES:
        raise EcConfigError(
            f"--ec-transfer-config ec_role must be one of {', '.join(EC_ROLES)} when "
            f"ec_connector is set, got {role!r}"
        )
    if connector not in SIM_CONNECTORS:
        raise EcConfigError(
            f"the stand-in carries only {', '.join(SIM_CONNECTORS)}, not {connector!r}"
        )
    extra = raw.get("ec_connector_extra_config")
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
        raise EcConfigError("ec_connector_extra_config must be a JSON object")
    path = extra.get("shared_storage_path", DEFAULT_STORAGE)
    if not isinstance(path, str) or not path:
        raise EcConfigError("ec_connector_extra_config.shared_storage_path must be a path")
    return EcSettings(connector, role, path)


def ec_settings(text: str | None, model_profile: str) -> EcSettings | None:
    """The parsed config, refused as vLLM refuses an encoder-only instance of a text-only
    model ("An EC producer-only instance requires a multimodal model")."""
    ec = parse_ec_transfer_config(text)
    if ec is not None and ec.encode_only and not profiles.model(model_profile).is_multimodal:
        raise EcConfigError(
            f"an EC producer-only instance requires a multimodal model; {model_profile} is "
            "text-only (--ec-transfer-config ec_role ec_producer)"
        )
    return ec
