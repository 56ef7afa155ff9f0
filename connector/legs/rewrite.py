"""Pure request rewriting for the two legs of a disaggregated request (PROTOCOL.md section 3).

Token count, decided from vLLM's source: the client gets exactly the `max_tokens` it asked for.
The prefill leg runs with max_tokens=1 and its one token is thrown away; the decode leg gets the
client's own `max_tokens` (and `max_completion_tokens`) unchanged.  Why: a decode request with
`do_remote_prefill` never trusts the transferred KV for the last prompt token. vLLM's scheduler,
on finishing a remote KV load, does `if num_computed_tokens == request.num_tokens:
num_computed_tokens -= 1` (vllm/v1/core/sched/scheduler.py, `_update_waiting_for_remote_kv`),
and MoRIIO READ's consumer `get_num_new_matched_tokens` returns `len(prompt) - 1 - computed`
(moriio_connector.py); NIXL's loads all prompt blocks and hits the same scheduler rule.  So the
decode recomputes the last prompt token, samples the first output token itself (the same one the
prefill sampled, under greedy decoding) and then generates up to `max_tokens` in total.  vLLM's
NIXL toy proxy forwards max_tokens unchanged; its MoRIIO toy proxy
(examples/online_serving/disaggregated_serving/moriio_toy_proxy_server.py) does
`max_tokens -= 1` and never forwards the prefill's token, so its clients get one token fewer
than they asked for; pdctl does not copy that.

Shapes (each connector's backend holds its own, domain/kv_connectors/):
- NIXL prefill: kv_transfer_params {do_remote_decode: true, do_remote_prefill: false,
  remote_*: null};
  NIXL decode: the prefill's returned kv_transfer_params verbatim. NIXL only pulls (read mode).
- MoRIIO: transfer_id "tx-<uuid4 hex>" on both legs; prefill adds the decode's remote_dp_size and
  remote_tp_size; decode gets {do_remote_decode: false, do_remote_prefill: true, transfer_id,
  remote_dp_size, remote_tp_size[, remote_dp_rank]} plus, in read mode, the prefill's returned
  block ids, engine id, host and ports. Header X-Request-Id
  "___prefill_addr_{P zmq}___decode_addr_{D zmq}_{32 hex}" on both legs; X-data-parallel-rank on
  a leg whose instance has dp_size > 1.
- A prefill that returns no kv_transfer_params: the decode gets the client's body untouched and
  recomputes the prefill.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from domain.kv_connectors import KvConnectorBackend, proxy_backend, proxy_names
from domain.modes import Mode

CONNECTORS = proxy_names()  # what `pdctl proxy --connector` takes
MODES = tuple(m.value for m in Mode)

_PREFILL_DROP = ("stream_options", "min_tokens", "min_completion_tokens")


@dataclass(frozen=True, slots=True)
class Peer:
    """What a leg needs to know about an instance: its ZMQ side-channel and parallel sizes."""

    zmq_address: str | None = None
    dp_size: int = 1
    tp_size: int = 1


@dataclass(frozen=True, slots=True)
class Handoff:
    """One request's hand-off identity: shared by both legs."""

    connector: str
    mode: str
    request_hex: str  # 32 hex digits
    prefill: Peer
    decode: Peer
    prefill_dp_rank: int | None = None
    decode_dp_rank: int | None = None
    # The connector's rules for the legs (domain/kv_connectors/), found once per hand-off.
    backend: KvConnectorBackend = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", proxy_backend(self.connector))

    @property
    def transfer_id(self) -> str:
        return "tx-" + self.request_hex

    @property
    def request_id(self) -> str:
        return self.backend.request_id(self)


def check_combination(connector: str, mode: str) -> None:
    """Raise ValueError for a connector/mode pair vLLM cannot run."""
    if connector not in CONNECTORS:
        raise ValueError(f"unknown connector {connector!r}; expected one of {CONNECTORS}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    backend = proxy_backend(connector)
    if mode == Mode.WRITE and not backend.has_modes:
        raise ValueError(f"{backend.label} has no write mode: the decode pulls the KV (use read)")


def prefill_body(
    body: dict[str, Any], h: Handoff, pull: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The prefill leg: a copy of the client's body capped at one token, not streamed. `pull`:
    an earlier turn's blocks for it to pull back (bidirectional KV, connector/legs/turn_kv.py)."""
    out = dict(body)
    for key in _PREFILL_DROP:
        out.pop(key, None)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    params: dict[str, Any] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    out["kv_transfer_params"] = h.backend.prefill_params(params, h, pull)
    return out


def decode_body(
    body: dict[str, Any], h: Handoff, prefill_params: dict[str, Any] | None
) -> dict[str, Any]:
    """The decode leg: the client's body (own stream setting, own max_tokens) plus hand-off params.

    `prefill_params` is the prefill's returned kv_transfer_params (read mode), or None in write
    mode, where the decode is sent before the prefill answers.
    """
    out = dict(body)
    params = h.backend.decode_params(h, prefill_params)
    if params is None:
        out.pop("kv_transfer_params", None)
    else:
        out["kv_transfer_params"] = params
    return out


def decode_bytes(
    raw: bytes, body: dict[str, Any], h: Handoff, prefill_params: dict[str, Any] | None
) -> bytes:
    """`decode_body` encoded, spliced onto the client's own bytes when that is the same JSON
    (the client sent no kv_transfer_params, and its body is a plain UTF-8 object): the prompt
    is never encoded again."""
    out = decode_body(body, h, prefill_params)
    return _spliced(raw, body, out) or json.dumps(out).encode()


def colocated_bytes(raw: bytes, body: dict[str, Any]) -> bytes:
    """The colocated leg's body: the client's, as it came when that is plain UTF-8 JSON."""
    return raw if _plain_object(raw) else json.dumps(body).encode()


def _spliced(raw: bytes, body: dict[str, Any], out: dict[str, Any]) -> bytes | None:
    if "kv_transfer_params" in body or not _plain_object(raw):
        return None
    params = out.get("kv_transfer_params")
    if params is None:
        return raw  # the decode gets the client's body untouched
    return b'%b, "kv_transfer_params": %b}' % (raw.rstrip()[:-1], json.dumps(params).encode())


def _plain_object(raw: bytes) -> bool:
    """A JSON object in UTF-8 (json.loads also takes UTF-16 and UTF-32, which never start
    and end with a brace byte)."""
    text = raw.strip()
    return text.startswith(b"{") and text.endswith(b"}")


def leg_headers(h: Handoff, leg: str) -> dict[str, str]:
    """Headers for one leg ("prefill" or "decode"): the shared X-Request-Id, the DP rank."""
    headers = {"Content-Type": "application/json", "X-Request-Id": h.request_id}
    peer, rank = (
        (h.prefill, h.prefill_dp_rank) if leg == "prefill" else (h.decode, h.decode_dp_rank)
    )
    if peer.dp_size > 1 and rank is not None:
        headers["X-data-parallel-rank"] = str(rank)
    return headers


def returned_params(prefill_response: object) -> dict[str, Any] | None:
    """The prefill's top-level kv_transfer_params, or None when it sent none."""
    if isinstance(prefill_response, dict):
        params = prefill_response.get("kv_transfer_params")
        if isinstance(params, dict) and params:
            return params
    return None
