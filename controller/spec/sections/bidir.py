"""Bidirectional KV for multi-turn (NIXL's `bidirectional_kv_xfer` extra config): which
deployments may turn it on, and the settings the proxy needs from it (PROTOCOL.md 4b).

With it on, a decode keeps a finished request's blocks for `decoder_kv_blocks_ttl` seconds
and returns kv_transfer_params naming them; the next turn's prefill pulls them back and
computes only the new tokens. Only the connectors whose backend says so have it (NIXL), so
any other connector, or no connector at all, is refused at the key that asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.spec.field_error import FieldError
from domain.kv_connectors import lookup, offering
from domain.modes import Role

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec

BIDIR_KEY = "bidirectional_kv_xfer"
TTL_KEY = "decoder_kv_blocks_ttl"
# vLLM frees blocks a remote peer never took after VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s by
# default; a decode's blocks kept for the next turn default to the same lease.
DEFAULT_TTL_S = 480.0
MAX_TTL_S = 86_400.0  # a day: blocks held longer only starve the decode's pool


@dataclass(frozen=True, slots=True)
class Bidirectional:
    """What the proxy is told: on or off, and how long a decode keeps a turn's blocks."""

    enabled: bool = False
    ttl_s: float = DEFAULT_TTL_S


def _sources(spec: DeploymentSpec) -> list[tuple[tuple, dict]]:
    """(where, extra config) for the deployment and each group, in that order."""
    out: list[tuple[tuple, dict]] = [
        (("kv_connector_extra_config",), spec.kv_connector_extra_config)
    ]
    for i, group in enumerate(spec.groups):
        out.append((("groups", i, "kv_connector_extra_config"), group.kv_connector_extra_config))
    return out


def check_bidirectional(spec: DeploymentSpec) -> None:
    """Raise FieldError at the key: bidirectional on anything but NIXL P/D, a value that is not
    a boolean, a TTL that is not a positive number of seconds, or groups that disagree."""
    for where, extra in _sources(spec):
        if BIDIR_KEY in extra:
            value = extra[BIDIR_KEY]
            if not isinstance(value, bool):
                raise FieldError((*where, BIDIR_KEY), f"{BIDIR_KEY} must be true or false")
            if value and not _has_it(spec):
                what = spec.connector or "a colocated deployment (no KV connector)"
                owner = offering("bidirectional_kv")[0]
                raise FieldError(
                    (*where, BIDIR_KEY),
                    f"{BIDIR_KEY} is {owner.label}'s ({owner.connector}) and {what} has no "
                    "such transfer",
                )
        if TTL_KEY in extra:
            ttl = extra[TTL_KEY]
            if (
                isinstance(ttl, bool)
                or not isinstance(ttl, int | float)
                or not 0 < ttl <= MAX_TTL_S
            ):
                raise FieldError(
                    (*where, TTL_KEY),
                    f"{TTL_KEY} must be a number of seconds above 0 and at most {MAX_TTL_S:g}",
                )
    groups = [
        (i, group)
        for i, group in enumerate(spec.groups)
        if group.role in (Role.PREFILL, Role.DECODE)
    ]
    seen = {
        (_effective(spec, g, BIDIR_KEY, False), _effective(spec, g, TTL_KEY, None))
        for _, g in groups
    }
    if len(seen) > 1:
        # A prefill that pulls from a decode that keeps nothing (or the other way round)
        # fails every follow-up turn's transfer: one setting for the whole deployment.
        i = next(
            i
            for i, g in groups
            if BIDIR_KEY in g.kv_connector_extra_config or TTL_KEY in g.kv_connector_extra_config
        )
        raise FieldError(
            ("groups", i, "kv_connector_extra_config", BIDIR_KEY),
            f"{BIDIR_KEY} and {TTL_KEY} must be the same for every prefill and decode group",
        )


def _has_it(spec: DeploymentSpec) -> bool:
    kv = lookup(spec.connector)
    return kv is not None and kv.bidirectional_kv


def _effective(spec: DeploymentSpec, group, key: str, default):
    return group.kv_connector_extra_config.get(
        key, spec.kv_connector_extra_config.get(key, default)
    )


def bidirectional(spec: DeploymentSpec) -> Bidirectional:
    """The deployment's setting (after check_bidirectional): read from its first P/D group."""
    for group in spec.groups:
        if group.role in (Role.PREFILL, Role.DECODE):
            on = _effective(spec, group, BIDIR_KEY, False) is True
            ttl = _effective(spec, group, TTL_KEY, None)
            return Bidirectional(on and _has_it(spec), float(ttl or DEFAULT_TTL_S))
    return Bidirectional()
