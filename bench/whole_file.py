"""Files other programs read while the bench runs (`--progress-file`, `--result-json`): each
is replaced whole, so a reader, or a kill mid-write, never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Write beside `path`, then rename over it: a rename within a directory is atomic."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
