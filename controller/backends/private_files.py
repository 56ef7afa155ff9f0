"""Files only the control plane's user may read: the run dir holds env secrets (deployment.json),
the proxies' admin tokens, pids and logs that may quote secrets. Directories 0700, files 0600,
whatever the umask, and an existing file or directory is narrowed to that too."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` as 0700, and its missing parents as well; an existing one is narrowed."""
    path = Path(path)
    missing = []
    step = path
    while not step.exists():
        missing.append(step)
        step = step.parent
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
    os.chmod(path, DIR_MODE)
    return path


def opener(path: str, flags: int) -> int:
    """For `open(..., opener=opener)`: a new file is created 0600, an old one narrowed to it."""
    fd = os.open(path, flags, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def write_text(path: Path, text: str) -> None:
    """Write `path` whole as 0600 (not atomic: see replace_text)."""
    with open(path, "w", opener=opener) as f:
        f.write(text)


def replace_text(path: Path, text: str) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_text(tmp, text)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
