"""Encoder disaggregation (EPD) in a deployment's spec: `encode` groups run a multimodal model's
vision encoder alone and hand its embeddings to the language-model instances through an EC
connector (vLLM's `--ec-transfer-config`, PROTOCOL.md 4b).

The encode instances are `ec_producer` (vLLM 0.32 then runs them encoder-only: no language
model, no KV cache, prefix caching off; vllm/config/vllm.py `_resolve_mm_encoder_only`); the
prefill instances of a disaggregated deployment, or the colocated ones of an E + PD layout, are
`ec_consumer`. Decode instances get no EC config: they never see the image (vLLM's
examples/online_serving/disaggregated_encoder/disagg_1e1p1d_example.sh).

Pure: pydantic, the checks relating `ec_transfer` to the rest of the spec, and the per-role
config the renderer puts on the command line.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from controller.spec.field_error import FieldError
from controller.spec.sections.kv_extra import KvExtra, check_keys
from domain.modes import Role

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec, InstanceGroup

# vLLM 0.32's registered EC connectors (vllm/distributed/ec_transfer/ec_connector/factory.py).
EXAMPLE = "ECExampleConnector"  # a shared filesystem: one safetensors file per image hash
EC_CONNECTORS = (EXAMPLE, "ECCPUConnector", "ECMooncakeConnector")
# What the stand-in models: the shared-storage file, as ECExampleConnector writes it.
SIM_EC_CONNECTORS = (EXAMPLE,)
STORAGE_KEY = "shared_storage_path"
PRODUCER, CONSUMER = "ec_producer", "ec_consumer"
# The roles that run the language model's prefill and so read the encoder's embeddings.
CONSUMER_ROLES = (Role.PREFILL, Role.COLOCATED)


class EcTransfer(BaseModel):
    """The deployment's EC connector: the same for every producer and consumer (they must
    agree on where the embeddings go)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ec_connector: str = EXAMPLE
    ec_connector_extra_config: KvExtra = Field(default_factory=dict)


def encode_groups(spec: DeploymentSpec) -> list[tuple[int, InstanceGroup]]:
    return [(i, g) for i, g in enumerate(spec.groups) if g.role is Role.ENCODE]


def check_encode(spec: DeploymentSpec) -> None:
    """Raise FieldError at the field: an encode group without `ec_transfer` (or the other way
    round), an unknown EC connector (or one the stand-in does not model), an encode group with
    KV-connector settings, ECExampleConnector without an absolute shared_storage_path, a
    model whose stand-in profile has no vision encoder, or encoders with nothing to feed."""
    groups = encode_groups(spec)
    ec = spec.ec_transfer
    if ec is None:
        if groups:
            i = groups[0][0]
            raise FieldError(
                ("groups", i, "role"),
                "an encode group needs ec_transfer (the EC connector its embeddings go through)",
            )
        return
    if not groups:
        raise FieldError(("ec_transfer",), "ec_transfer without an encode group has no producer")
    _check_connector(spec, ec)
    for i, group in groups:
        if group.mode is not None:
            raise FieldError(
                ("groups", i, "mode"),
                "an encode group moves no KV: it has no read/write mode",
            )
        if group.kv_connector_extra_config:
            raise FieldError(
                ("groups", i, "kv_connector_extra_config"),
                "an encode group moves no KV: it has no KV connector to configure",
            )
    if not any(g.role in CONSUMER_ROLES for g in spec.groups):
        raise FieldError(("groups",), "encode groups need a prefill or colocated group to feed")
    _check_multimodal(spec)


def _check_connector(spec: DeploymentSpec, ec: EcTransfer) -> None:
    where = ("ec_transfer", "ec_connector")
    if ec.ec_connector not in EC_CONNECTORS:
        raise FieldError(
            where,
            f"unknown EC connector {ec.ec_connector!r}; vLLM 0.32 has {', '.join(EC_CONNECTORS)}",
        )
    if spec.engine.value == "sim" and ec.ec_connector not in SIM_EC_CONNECTORS:
        raise FieldError(
            where,
            f"the stand-in (engine sim) models only {', '.join(SIM_EC_CONNECTORS)}",
        )
    extra = ec.ec_connector_extra_config
    check_keys(("ec_transfer", "ec_connector_extra_config"), extra, frozenset())
    if ec.ec_connector == EXAMPLE:
        path = extra.get(STORAGE_KEY)
        loc = ("ec_transfer", "ec_connector_extra_config", STORAGE_KEY)
        if path is None:
            raise FieldError(
                loc,
                f"{EXAMPLE} needs {STORAGE_KEY}: the directory encoders write and "
                "prefills read (vLLM would fall back to /tmp)",
            )
        if not isinstance(path, str) or not PurePosixPath(path).is_absolute():
            raise FieldError(loc, f"{STORAGE_KEY} must be an absolute path both sides see")
        if ".." in PurePosixPath(path).parts:
            raise FieldError(loc, f"{STORAGE_KEY} may not contain '..'")


def _check_multimodal(spec: DeploymentSpec) -> None:
    from domain import profiles

    name = profiles.for_model(spec.model)
    if name is None:  # a model pdctl has no profile for: vLLM refuses a text-only one itself
        return
    if not profiles.model(name).is_multimodal:
        raise FieldError(
            ("model",),
            f"{spec.model} has no vision encoder (its profile {name!r} is text-only): "
            "an encode group needs a multimodal model",
        )


def ec_transfer_config(spec: DeploymentSpec, group: InstanceGroup) -> dict[str, Any] | None:
    """The --ec-transfer-config of one instance of `group`: producer on encode instances,
    consumer on prefill (or colocated) ones, none on decode or without ec_transfer."""
    ec = spec.ec_transfer
    if ec is None:
        return None
    if group.role is Role.ENCODE:
        role = PRODUCER
    elif group.role in CONSUMER_ROLES:
        role = CONSUMER
    else:
        return None
    config: dict[str, Any] = {"ec_connector": ec.ec_connector, "ec_role": role}
    if ec.ec_connector_extra_config:
        config["ec_connector_extra_config"] = dict(ec.ec_connector_extra_config)
    return config
