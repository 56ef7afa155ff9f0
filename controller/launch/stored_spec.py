"""How a deployment spec is stored, read back and shown in events: the rules state/store/
is given (it knows no spec), so the store stays below the controller.

`StoredSpec` reads and writes; services/admission.py's `Admission` adds admitting a new spec
(validation and ports). Reading goes through today's rules: what they refuse is `Unfit`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pydantic import ValidationError

from controller.launch.ports import AllocatedPorts
from controller.spec.deployment import DeploymentSpec, InstancePorts
from controller.spec.redact import redact_spec
from domain.finite import non_finite
from state.store import Unfit


def ports_to_json(ports: AllocatedPorts) -> dict:
    return {
        "proxy": ports.proxy,
        "registry": ports.registry,
        "instances": {k: v.model_dump() for k, v in ports.instances.items()},
    }


def ports_from_json(data: Mapping) -> AllocatedPorts:
    return AllocatedPorts(
        data["proxy"],
        data["registry"],
        {k: InstancePorts(**v) for k, v in data["instances"].items()},
    )


class StoredSpec:
    """The store's rules for reading a spec; services/admission.py's `Admission` adds writing
    (admit, renamed, fresh)."""

    __slots__ = ()

    def load(self, spec: dict, ports: dict) -> tuple[DeploymentSpec, AllocatedPorts]:
        """A stored spec and ports, typed; Unfit naming the first field that fails,
        non-finite numbers refused whatever the model says."""
        places = non_finite(spec)
        if places:
            raise Unfit(places[0], "not a finite number")
        try:
            typed = DeploymentSpec.model_validate(spec)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            raise Unfit(first["loc"], first["msg"]) from None
        try:
            return typed, ports_from_json(ports)
        except (KeyError, TypeError, ValueError, ValidationError):
            raise Unfit(("ports",), "malformed") from None

    def claimed(self, spec: Mapping, ports: Mapping) -> set[int]:
        """The ports a stored revision claims; of an unreadable one, every port it lists."""
        try:
            return ports_from_json(ports).claimed(DeploymentSpec.model_validate(spec))
        except (ValidationError, KeyError, TypeError, ValueError):
            return set(_ints(ports))

    def dump(self, spec: DeploymentSpec) -> dict:
        return spec.model_dump(mode="json")

    def dump_ports(self, ports: AllocatedPorts) -> dict:
        return ports_to_json(ports)

    def redact(self, spec: dict) -> dict:
        return redact_spec(spec)

    def unsafe(self, spec: DeploymentSpec) -> tuple[str, dict] | None:
        """An override of the engine allowlists, said in every event of a revision with it."""
        unsafe = spec.unsafe_allow
        return (unsafe.summary(), unsafe.model_dump(mode="json")) if unsafe else None


def _ints(node: object) -> Iterator[int]:
    if isinstance(node, bool):
        return
    if isinstance(node, int):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _ints(v)
    elif isinstance(node, list):
        for v in node:
            yield from _ints(v)
