"""`pdctl serve` and its database file, for real (issue 39, weak 7 and 8): a second control
plane on the same file reached by another path (a symlink to it, a symlinked folder, a hard
link) is refused naming --db; a damaged file is one line naming it and exit 2, whatever the
damage, before migrations or requests touch it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.processes import ROOT, free_port, port_range
from state import migrate
from tests.e2e.serve.test_hardening import request, serve

pytestmark = pytest.mark.e2e


def second_serve(db: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "serve", "--port", str(free_port())],
        cwd=ROOT,
        env={
            **os.environ,
            "PDCTL_DB": str(db),
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_RUNTIME_DIR": str(tmp_path / "runs2"),
            "PDCTL_CONTROLLER": "false",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_same_database_by_another_path_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "data" / "pdctl.db"
    db.parent.mkdir()
    first = serve(tmp_path, db=db)
    try:
        (tmp_path / "link.db").symlink_to(db)
        (tmp_path / "folder").symlink_to(db.parent)
        os.link(db, tmp_path / "hard.db")
        for other in (
            tmp_path / "link.db",
            tmp_path / "folder" / "pdctl.db",
            tmp_path / "hard.db",
            tmp_path / "data" / ".." / "data" / "pdctl.db",
        ):
            second = second_serve(other, tmp_path)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 2, (other, second.stderr)
            assert len(lines) == 1 and "is in use by another pdctl serve" in lines[0], lines
            assert f"--db {other}" in lines[0]
        assert request(first, "GET", "/health")[0] == 200
    finally:
        first.stop()


def damaged(tmp_path: Path) -> dict[str, Path]:
    """Files damaged three ways: not SQLite at all, a valid header over garbage pages, and
    a migrated database with one of its pages overwritten."""
    files = {}
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(64 * 1024))
    files["not sqlite"] = junk
    header = tmp_path / "header.db"
    migrate.upgrade(header)
    raw = header.read_bytes()
    header.write_bytes(raw[:100] + os.urandom(len(raw) - 100))
    files["garbage pages"] = header
    page = tmp_path / "page.db"
    migrate.upgrade(page)
    with sqlite3.connect(page) as c:
        size = c.execute("PRAGMA page_size").fetchone()[0]
        c.execute("PRAGMA journal_mode=DELETE")
    with open(page, "r+b") as f:
        f.seek(size * 2)  # the third page: a table's b-tree
        f.write(os.urandom(size))
    files["one page overwritten"] = page
    return files


def test_a_damaged_database_is_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    for what, db in damaged(tmp_path).items():
        out = second_serve(db, tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (what, out.stderr[-2000:])
        assert len(lines) == 1, (what, out.stderr[-2000:])
        assert f"--db {db} is damaged" in lines[0], (what, lines)
