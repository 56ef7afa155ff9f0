"""controller/backends/ray_host.py's pure parts: the source fingerprint every node must share, and
where a
node keeps its run directory."""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="the Ray backend needs Ray (`pip install 'pdctl[ray]'`)")

from controller.backends.ray_host import PACKAGES, fingerprint, node_run_root


def tree(root, text: str = "x = 1\n"):
    root.mkdir(parents=True, exist_ok=True)
    (root / "pdctl.py").write_text("main = None\n")
    for pkg in PACKAGES:
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text(text)
    return root


def test_the_fingerprint_changes_with_any_source_and_only_with_sources(tmp_path):
    a = fingerprint(tree(tmp_path / "a"))
    assert a == fingerprint(tree(tmp_path / "b"))  # the same sources elsewhere: the same pdctl
    (tmp_path / "b" / "web" / "notes.txt").write_text("not code")
    assert fingerprint(tmp_path / "b") == a
    (tmp_path / "b" / "controller" / "new.py").write_text("y = 2\n")
    assert fingerprint(tmp_path / "b") != a
    assert fingerprint(tree(tmp_path / "c", "x = 2\n")) != a


def test_each_node_address_keeps_its_own_run_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("PDCTL_NODE_RUN_DIR", raising=False)
    assert node_run_root("127.0.0.2", "pdctl") != node_run_root("127.0.0.3", "pdctl")
    monkeypatch.setenv("PDCTL_NODE_RUN_DIR", str(tmp_path))
    assert node_run_root("127.0.0.2", "ns") == tmp_path / "ns"
