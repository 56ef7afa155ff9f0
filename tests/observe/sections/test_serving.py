"""The frame's `serving` section: the supervisor's revision and read/write modes of a
deployment, which the page header follows; none for a deployment not supervised."""

from __future__ import annotations

from types import SimpleNamespace

from controller import DeploymentSpec
from observe.sections.serving import serving, serving_section
from tests.specs import moriio_1p1d, nixl_1p1d


def supervised(body: dict, revision: int) -> SimpleNamespace:
    return SimpleNamespace(spec=DeploymentSpec.model_validate(body), revision=revision)


def test_the_section_says_the_revision_and_modes_the_supervisor_runs() -> None:
    assert serving(supervised(moriio_1p1d(mode="write"), 6)) == {
        "revision": 6,
        "modes": ["write"],
    }
    assert serving(supervised(nixl_1p1d(), 2)) == {"revision": 2, "modes": []}
    assert serving(None) is None


def test_the_observer_s_section_looks_the_deployment_up_by_name() -> None:
    deployments = {"mori": supervised(moriio_1p1d(mode="read"), 5)}
    section = serving_section(SimpleNamespace(supervisor=SimpleNamespace(deployments=deployments)))
    assert section("mori") == {"revision": 5, "modes": ["read"]}
    assert section("gone") is None
