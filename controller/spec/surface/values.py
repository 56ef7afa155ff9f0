"""Whether one value of an env name or flag does only what its table entry says: a setting
that does not read as code, a path under the operator's roots, a listener on the instance's
bound address. Each form of value (a JSON config, a chat template, a model reference, LoRA
adapters, KV-event endpoints) is read for the paths and addresses inside it.

Pure apart from reach.path_problem, which follows links on this host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from controller.spec.surface.kinds import Entry, Kind
from controller.spec.surface.reach import EngineReach, address_problem, path_problem

# A value that reads as a Python object by name: logging's ext:// and cfg:// resolvers import
# modules; a *_module_path is imported by the connector that reads it.
_CODE_VALUE = re.compile(r"^\s*(ext|cfg)://|module_path", re.IGNORECASE)
# Inside a JSON setting, a dotted name (pkg.mod.Class, pkg.mod:fn) is an import path: vLLM's
# configs take classes and functions that way (a KV cache policy, an inductor pass).
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:\w+)?$")
# A Hugging Face id ("org/name" or "name"): anything else is a local path.
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_JINJA = ("{", "}", "\n")
# Words of a JSON key (split at "_") that say what its value names.
CODE_KEY_WORDS = ("module", "plugin", "class", "cls", "hook")  # anywhere in the key
PATH_KEY_WORDS = frozenset({"path", "paths", "dir", "directory", "file", "folder", "root"})
NET_KEY_WORDS = frozenset({"endpoint", "url", "uri", "host", "hostname", "addr", "address", "ip"})
KV_EVENTS_DEFAULT_ENDPOINT = "tcp://*:5557"  # vLLM's KVEventsConfig.endpoint


def problems(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """Why `value` may not be given to `entry`; empty when it may."""
    if entry.values is not None:
        if value in entry.values:
            return []
        return [f"takes one of {', '.join(sorted(entry.values))} ({entry.reason()})"]
    if value in entry.code_values:
        return [f"{value!r} loads code ({entry.reason()})"]
    if _CODE_VALUE.search(value):
        return [f"{value!r} reads as code: a Python object or module by name"]
    read = _FORMS.get(entry.form or "", _plain)
    return read(entry, value, reach)


def key_problems(key: str, value: Any, reach: EngineReach) -> list[str]:
    """Why one key of a JSON setting may not have `value`, by what the key names."""
    words = key.lower().split("_")
    if code := next((w for w in CODE_KEY_WORDS if w in key.lower()), None):
        return [f"{key} names code to load ({code!r}: a module, plugin, class or hook)"]
    if PATH_KEY_WORDS & set(words):
        return [f"{key}: {p}" for p in _paths(_strings(value), reach)]
    if NET_KEY_WORDS & set(words):
        return [f"{key} names a server or an address, which an engine here does not reach"]
    if isinstance(value, dict):
        return object_problems(value, reach)
    if isinstance(value, list):  # settings of several items: each object read as one
        nested = [p for v in value if isinstance(v, dict) for p in object_problems(v, reach)]
        if nested:
            return nested
    for text in _strings(value):
        if _CODE_VALUE.search(text) or _IMPORT_PATH.match(text):
            return [f"{key}: {text!r} reads as code: a Python object or module by name"]
    return []


def json_problems(value: str, reach: EngineReach) -> list[str]:
    """Every key of a JSON object setting, classified (a value that is no object: a scalar)."""
    parsed = _json(value)
    if isinstance(parsed, list):
        return key_problems("", parsed, reach)
    return object_problems(parsed, reach) if isinstance(parsed, dict) else []


def object_problems(config: dict[str, Any], reach: EngineReach) -> list[str]:
    return [p for k, v in config.items() for p in key_problems(str(k), v, reach)]


def _plain(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    if entry.kind is Kind.PATH:
        return _paths([value], reach)
    if entry.kind is Kind.LISTENER:
        return [p for p in [address_problem(value, reach)] if p]
    return []


def _json_form(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    return json_problems(value, reach)


def _template(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """vLLM opens a chat template as a file first, then takes it as text: text is what has
    Jinja's characters and does not start like a path."""
    if any(c in value for c in _JINJA) and not value.startswith(("/", "~", ".")):
        return []
    return _paths([value], reach)


def _model(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    if _HF_ID.match(value) and ".." not in value:
        return []
    return _paths([value], reach)


def _draft(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """A draft model, or (vLLM reads a dotted identifier so) a proposer class to import."""
    parts = value.split(".")
    if "/" not in value and len(parts) >= 2 and all(p.isidentifier() for p in parts):
        return [f"{value!r} reads as an import path (a proposer class: code)"]
    return _model(entry, value, reach)


def _lora(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """NAME=PATH, or {"name": ..., "path": ..., "base_model_name": ...}."""
    parsed = _json(value)
    if isinstance(parsed, dict):
        return object_problems(parsed, reach)
    return _paths([value.partition("=")[2] or value], reach)


def _mm_loras(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """{"modality": PATH, ...}"""
    parsed = _json(value)
    if not isinstance(parsed, dict):
        return [f"{value!r} is not a JSON object of paths"]
    return _paths([v if isinstance(v, str) else "" for v in parsed.values()], reach)


def _kv_events(entry: Entry, value: str, reach: EngineReach) -> list[str]:
    """vLLM publishes KV events over ZMQ when enabled, by default on every interface."""
    parsed = _json(value)
    if not isinstance(parsed, dict):
        return [f"{value!r} is not a JSON object (KVEventsConfig)"]
    publisher = parsed.get("publisher") or ("zmq" if parsed.get("enable_kv_cache_events") else "")
    rest = {k: v for k, v in parsed.items() if k not in ("endpoint", "replay_endpoint")}
    if publisher in ("", "null"):
        return object_problems(rest, reach)
    found = []
    for key in ("endpoint", "replay_endpoint"):
        given = parsed.get(key, KV_EVENTS_DEFAULT_ENDPOINT if key == "endpoint" else None)
        if given is not None:
            found += [f"{key}: {p}" for p in _endpoint(str(given), reach)]
    return found + object_problems(rest, reach)


def _endpoint(value: str, reach: EngineReach) -> list[str]:
    scheme, _, rest = value.partition("://")
    if scheme == "tcp":
        return [p for p in [address_problem(value, reach)] if p]
    if scheme == "ipc":
        return _paths([rest], reach)
    return [f"{value!r}: an endpoint here is tcp://ADDRESS:PORT or ipc://PATH"]


def _paths(values: list[str], reach: EngineReach) -> list[str]:
    return [p for p in (path_problem(v, reach) for v in values) if p]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return None


_FORMS: dict[str, Callable[[Entry, str, EngineReach], list[str]]] = {
    "json": _json_form,
    "template": _template,
    "model": _model,
    "draft": _draft,
    "lora": _lora,
    "mm-loras": _mm_loras,
    "kv-events": _kv_events,
}
