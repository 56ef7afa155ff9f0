"""The deployment form: HTML form fields <-> the spec's JSON, and the API's 422 items placed at
the inputs they name. Pure: no request, no store.

Each input is named by its field path, as a 422's `loc` names it (`slo.ttft_ms`,
`groups.0.gpus`), so an error finds its input by walking its `loc` up to the nearest input.
A group's fields the form does not show (ports, env, extra args, ...) ride along as JSON in a
hidden `groups.N._rest` input, so editing keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import CONNECTORS, EC_CONNECTORS, STORAGE_KEY
from domain.measures.slo import DEFAULT_ITL_STAT
from domain.measures.slo import ITL_STATS as _ITL_STATS
from domain.modes import TRANSFER_MODES, Role

ENGINES = ("sim", "vllm")
TOPOLOGIES = ("disaggregated", "colocated")
ROLES = tuple(r.value for r in Role)
MODES = ("", *(m.value for m in TRANSFER_MODES))
POLICIES = ("round-robin", "least-tokens")
# The form offers the default first.
ITL_STATS = (DEFAULT_ITL_STAT.value, *(s for s in _ITL_STATS if s != DEFAULT_ITL_STAT))
CONNECTOR_CHOICES = ("", *CONNECTORS)
# Encoder disaggregation (controller/spec/sections/encode.py): no connector chosen is no
# ec_transfer at all.
EC_CONNECTOR = "ec_transfer.ec_connector"
EC_STORAGE = f"ec_transfer.ec_connector_extra_config.{STORAGE_KEY}"
EC_CHOICES = ("", *EC_CONNECTORS)

GROUP_FIELDS = ("name", "role", "count", "tp", "gpus", "mode")
_TEXT = (
    "name",
    "engine",
    "model",
    "hardware",
    "topology",
    "connector",
    "prefix_caching_override_reason",
    "proxy.policy",
    "slo.ttft_ms",
    "slo.itl_ms",
    "slo.itl_stat",
)
_BLANK_IS_NONE = ("hardware", "connector", "prefix_caching_override_reason")
_NUMBERS = ("slo.ttft_ms", "slo.itl_ms")
_GROUP_SHOWN = frozenset(GROUP_FIELDS)
_EC = (EC_CONNECTOR, EC_STORAGE)


@dataclass
class FormValues:
    """What the form shows: top-level inputs by name, and one dict per group row."""

    fields: dict[str, str] = field(default_factory=dict)
    groups: list[dict[str, str]] = field(default_factory=list)
    prefix_caching: bool = False
    extra_args: str = ""
    revision: int | None = None  # the revision an edit form was filled from

    def input_names(self) -> set[str]:
        names = {*_TEXT, *_EC, "ec_transfer", "prefix_caching", "extra_args", "groups"}
        for i in range(len(self.groups)):
            names |= {f"groups.{i}", *(f"groups.{i}.{f}" for f in GROUP_FIELDS)}
        return names


def blank_group(index: int, role: str = "prefill") -> dict[str, str]:
    return {
        "name": f"group-{index}",
        "role": role,
        "count": "1",
        "tp": "1",
        "gpus": "",
        "mode": "",
        "_rest": "{}",
    }


def new_values() -> FormValues:
    """A fresh form: a stand-in MoRIIO 1P1D on the tiny model, the usual starting point."""
    return FormValues(
        fields={
            "name": "",
            "engine": "sim",
            "model": "tiny",
            "hardware": "",
            "topology": "disaggregated",
            "connector": "MoRIIOConnector",
            "prefix_caching_override_reason": "",
            "proxy.policy": "round-robin",
            "slo.ttft_ms": "1000",
            "slo.itl_ms": "50",
            "slo.itl_stat": "p99",
            EC_CONNECTOR: "",
            EC_STORAGE: "",
        },
        groups=[
            {**blank_group(0), "name": "prefill", "role": "prefill", "mode": "read"},
            {**blank_group(1), "name": "decode", "role": "decode", "mode": "read"},
        ],
    )


def values_from_spec(spec: Mapping[str, Any]) -> FormValues:
    """The form filled in from a stored spec (JSON-mode dump)."""
    fields = {key: _text(_get(spec, key)) for key in (*_TEXT, *_EC)}
    groups = []
    stored_groups = spec.get("groups")
    for g in stored_groups if isinstance(stored_groups, list) else []:
        if not isinstance(g, Mapping):
            continue  # a stored spec today's rules refuse: shown as far as it goes
        row = {f: _text(g.get(f)) for f in GROUP_FIELDS}
        gpus = g.get("gpus")
        row["gpus"] = ", ".join(str(x) for x in gpus) if isinstance(gpus, list) else ""
        row["_rest"] = json.dumps({k: v for k, v in g.items() if k not in _GROUP_SHOWN})
        groups.append(row)
    extra = spec.get("extra_args") or []
    return FormValues(
        fields=fields,
        groups=groups,
        prefix_caching=bool(spec.get("prefix_caching", True)),
        extra_args="\n".join(str(a) for a in extra if isinstance(extra, list)),
    )


def values_from_form(form: Mapping[str, str]) -> FormValues:
    """The form as posted (strings only; the browser leaves unchecked boxes out)."""
    fields = {key: str(form.get(key, "")).strip() for key in (*_TEXT, *_EC)}
    indexes = sorted(
        {
            int(k.split(".")[1])
            for k in form
            if k.startswith("groups.") and k.split(".")[1].isdigit()
        }
    )
    groups = [
        {f: str(form.get(f"groups.{i}.{f}", "")).strip() for f in (*GROUP_FIELDS, "_rest")}
        for i in indexes
    ]
    revision = str(form.get("revision", "")).strip()
    return FormValues(
        fields=fields,
        groups=groups,
        prefix_caching="prefix_caching" in form,
        extra_args=str(form.get("extra_args", "")),
        revision=int(revision) if revision.isdigit() else None,
    )


def spec_from_values(values: FormValues, base: Mapping[str, Any] | None = None) -> dict:
    """The spec JSON the form describes, over `base` (the stored spec when editing, so that
    fields without an input keep their values). Unparseable numbers stay strings, so that
    validation names the field."""
    spec: dict[str, Any] = json.loads(json.dumps(dict(base or {})))
    for key in _TEXT:
        raw = values.fields.get(key, "")
        if key in _NUMBERS:
            value: Any = None if raw == "" else _number(raw, float)
        elif key in _BLANK_IS_NONE and raw == "":
            value = None
        else:
            value = raw
        _put(spec, key, value)
    spec["prefix_caching"] = values.prefix_caching
    spec["extra_args"] = [line.strip() for line in values.extra_args.splitlines() if line.strip()]
    spec["groups"] = [_group(row) for row in values.groups]
    _put_ec(spec, values.fields.get(EC_CONNECTOR, ""), values.fields.get(EC_STORAGE, ""))
    return spec


def _put_ec(spec: dict[str, Any], connector: str, storage: str) -> None:
    """The EC connector the form names, over the stored one (its other extra keys kept); no
    connector: no encoder disaggregation."""
    if not connector:
        spec.pop("ec_transfer", None)
        return
    ec = spec.get("ec_transfer")
    ec = dict(ec) if isinstance(ec, dict) else {}
    extra = ec.get("ec_connector_extra_config")
    extra = dict(extra) if isinstance(extra, dict) else {}
    if storage:
        extra[STORAGE_KEY] = storage
    else:
        extra.pop(STORAGE_KEY, None)
    ec.update(ec_connector=connector, ec_connector_extra_config=extra)
    spec["ec_transfer"] = ec


def _group(row: Mapping[str, str]) -> dict[str, Any]:
    try:
        rest = json.loads(row.get("_rest") or "{}")
    except ValueError:
        rest = {}
    group = dict(rest) if isinstance(rest, dict) else {}
    group.update(name=row.get("name", ""), role=row.get("role", ""), mode=row.get("mode") or None)
    for key in ("count", "tp"):
        if row.get(key, "") != "":
            group[key] = _number(row[key], int)
    gpus = row.get("gpus", "").replace(",", " ").split()
    group["gpus"] = [_number(g, int) for g in gpus]
    return group


def errors_at_fields(
    detail: object, names: Iterable[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """The 422 `detail` items by the input they belong to: each `loc` (after "body") walked up
    to the nearest input name; what names no input is returned as general messages."""
    names = set(names)
    at: dict[str, list[str]] = {}
    general: list[str] = []
    items = detail if isinstance(detail, list) else [{"loc": [], "msg": str(detail)}]
    for item in items:
        loc = [str(p) for p in item.get("loc", [])]
        if loc[:1] == ["body"]:
            loc = loc[1:]
        msg = str(item.get("msg", "invalid"))
        for end in range(len(loc), 0, -1):
            key = ".".join(loc[:end])
            if key in names:
                at.setdefault(key, []).append(msg)
                break
        else:
            general.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return at, general


def pydantic_detail(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """pydantic's `ValidationError.errors()` in FastAPI's 422 shape."""
    return [
        {"loc": ["body", *e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]


def _number(raw: str, kind: type) -> Any:
    try:
        return kind(raw)
    except ValueError:
        return raw


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _get(spec: Mapping[str, Any], key: str) -> Any:
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _put(spec: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
