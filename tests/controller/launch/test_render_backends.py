"""A new KV connector is one backend module: registered, its spec validates, its ports are
allocated, and the render asks it for the kv-transfer-config, env and proxy flags."""

from __future__ import annotations

import json
from typing import Any

import pytest

import domain.kv_connectors as kv
from controller.launch.ports import allocate
from controller.launch.render import render
from controller.spec.rules import check
from domain.kv_connectors.base import InstanceKv
from tests.specs import nixl_1p1d, spec


class Fake(kv.KvConnectorBackend):
    """What a module such as domain/kv_connectors/fake.py would hold."""

    connector = "FakeConnector"
    label = "Fake"
    kv_ports = frozenset({"side_channel"})

    def kv_transfer_config(self, inst: InstanceKv) -> dict[str, Any]:
        return {"kv_connector": self.connector, "kv_role": f"fake_{inst.role}"}

    def kv_env(self, inst: InstanceKv) -> dict[str, str]:
        return {"FAKE_PORT": str(inst.ports.side_channel)}


@pytest.fixture
def fake():
    backend = kv.register(Fake())
    yield backend
    kv.unregister(backend.connector)


def test_a_registered_backend_renders_its_instances(fake) -> None:
    s = spec(nixl_1p1d(connector="FakeConnector"))
    check(s)
    ports = allocate(s)
    launches = {launch.name: launch for launch in render(s, ports)}
    prefill = launches["prefill-0"]
    config = json.loads(prefill.argv[prefill.argv.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "FakeConnector", "kv_role": "fake_prefill"}
    side_channel = ports.instances["decode-0"].side_channel
    assert side_channel is not None and ports.instances["decode-0"].handshake is None
    assert launches["decode-0"].env["FAKE_PORT"] == str(side_channel)
    proxy = launches["proxy"].argv
    assert proxy[proxy.index("--connector") + 1] == "nixl"  # routed in NIXL's shape


def test_an_unregistered_connector_is_refused_at_its_field() -> None:
    from controller.spec.field_error import FieldError

    with pytest.raises(FieldError, match="unknown connector 'FakeConnector'; known: Nixl"):
        check(spec(nixl_1p1d(connector="FakeConnector")))
