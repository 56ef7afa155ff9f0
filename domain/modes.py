"""One spelling for the mode of an instance group, the role of an instance and the KV
connector. Wire formats that exist already stay accepted as aliases (`parse_role`)."""

from __future__ import annotations

import enum
from typing import Literal


class Mode(enum.StrEnum):
    """How a group hands KV over: MoRIIO read (decode pulls) or write (prefill pushes); or a
    colocated group, which serves whole requests."""

    READ = "read"
    WRITE = "write"
    COLOCATED = "colocated"


TRANSFER_MODES = (Mode.READ, Mode.WRITE)
# The same two as a type for request schemas (pydantic, typer): a group's MoRIIO mode.
TransferModeName = Literal["read", "write"]


class Role(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"
    ENCODE = "encode"
    RENDER = "render"


# The proxy's admin API and registry have long said "both" for a colocated instance.
ROLE_ALIASES = {"both": Role.COLOCATED}


def parse_role(text: str) -> Role:
    """A role from its name or an accepted alias; ValueError naming the choices."""
    role = ROLE_ALIASES.get(text)
    if role is not None:
        return role
    try:
        return Role(text)
    except ValueError:
        choices = ", ".join([*(r.value for r in Role), *ROLE_ALIASES])
        raise ValueError(f"role must be one of {choices}, got {text!r}") from None


class Connector(enum.StrEnum):
    """vLLM's registered KV connectors that pdctl renders (PROTOCOL.md section 1). What each
    one can do, its backend says (domain/kv_connectors/)."""

    MORIIO = "MoRIIOConnector"
    NIXL = "NixlConnector"
    MOONCAKE = "MooncakeConnector"
    LMCACHE = "LMCacheConnectorV1"
    P2P_NCCL = "P2pNcclConnector"
    EXAMPLE = "ExampleConnector"
