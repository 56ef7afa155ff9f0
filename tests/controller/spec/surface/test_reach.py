"""Where an engine's paths and listeners may point: under the operator's roots (as written and
through links), and on the instance's bound address."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.spec.surface.reach import (
    EngineReach,
    address_problem,
    model_cache,
    path_problem,
    reach_for,
)


@pytest.fixture
def reach(tmp_path: Path) -> EngineReach:
    (tmp_path / "root" / "models").mkdir(parents=True)
    return EngineReach(roots=(str(tmp_path / "root"),))


def test_paths_under_a_root_pass(reach: EngineReach) -> None:
    root = reach.roots[0]
    for path in (root, f"{root}/models", f"{root}/not/yet/made", f"{root}/models/"):
        assert path_problem(path, reach) is None, path


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/etc", "is not under the operator's roots"),
        ("/etc/shadow", "is not under"),
        ("relative/dir", "not an absolute path"),
        ("~/.cache", "not an absolute path"),
        ("", "not an absolute path"),
    ],
)
def test_paths_elsewhere_are_refused(reach: EngineReach, path: str, says: str) -> None:
    assert says in (path_problem(path, reach) or "")


def test_a_root_is_a_directory_not_a_prefix(reach: EngineReach) -> None:
    assert path_problem(reach.roots[0] + "-sibling/x", reach) is not None


def test_dot_dot_and_links_cannot_climb_out(reach: EngineReach, tmp_path: Path) -> None:
    root = reach.roots[0]
    assert "climbs out" in (path_problem(f"{root}/../../etc", reach) or "")
    (Path(root) / "escape").symlink_to("/etc")
    assert "leads through a link" in (path_problem(f"{root}/escape/shadow", reach) or "")


def test_no_roots_means_no_paths() -> None:
    assert "none is set" in (path_problem("/srv/models", EngineReach()) or "")


def test_the_default_root_is_the_model_cache() -> None:
    assert model_cache({"HF_HUB_CACHE": "/m/hub"}) == "/m/hub"
    assert model_cache({"HF_HOME": "/h"}) == "/h/hub"
    assert model_cache({"XDG_CACHE_HOME": "/x"}) == "/x/huggingface/hub"
    assert reach_for([], {"HF_HOME": "/h"}).roots == ("/h/hub",)
    assert reach_for(["/a", " ", "/b"], {"HF_HOME": "/h"}).roots == ("/a", "/b")


@pytest.mark.parametrize(
    "value",
    ["0.0.0.0", "*", "::", "", "tcp://*:5557", "tcp://0.0.0.0:1", "[::]:80", "0.0.0.0:29500"],
)
def test_every_interface_is_refused(value: str) -> None:
    assert "every interface" in (address_problem(value, EngineReach()) or "")


@pytest.mark.parametrize(
    "value", ["10.1.2.3", "192.168.0.7:5600", "example.com", "tcp://8.8.8.8:1"]
)
def test_another_address_is_refused(value: str) -> None:
    assert "not the instance's bound address" in (address_problem(value, EngineReach()) or "")


@pytest.mark.parametrize("value", ["127.0.0.1", "localhost", "::1", "127.0.0.1:5600", "[::1]:9"])
def test_loopback_passes_when_the_engine_binds_loopback(value: str) -> None:
    assert address_problem(value, EngineReach()) is None


def test_a_node_address_passes_only_on_that_node() -> None:
    node = EngineReach(bound="10.0.0.5")
    assert address_problem("10.0.0.5", node) is None
    assert address_problem("127.0.0.1", node) is not None


def test_the_default_roots_are_the_model_cache_and_the_run_dirs_engine_files() -> None:
    reach = reach_for([], {"HF_HOME": "/h"}, Path("/var/pdctl/runs"))
    assert reach.roots == ("/h/hub", "/var/pdctl/runs/engine-files")
    # never the run dir itself: it holds other deployments' state and admin tokens
    assert path_problem("/var/pdctl/runs/pd/proxy-admin-token", reach) is not None
