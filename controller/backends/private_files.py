"""Files only the control plane's user may read: the run dir holds env secrets (deployment.json),
the proxies' admin tokens, pids and logs that may quote secrets. Directories 0700, files 0600,
whatever the umask, and an existing file or directory is narrowed to that too."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from domain import secret_files

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
    if stat.S_IMODE(path.stat().st_mode) != DIR_MODE:  # a read-only mount refuses any chmod
        os.chmod(path, DIR_MODE)
    return path


def opener(path: str, flags: int) -> int:
    """For `open(..., opener=opener)`: a new file is created 0600, an old one narrowed to it;
    never through a symlink (a log appended through one planted in a shared dir would hand
    its secrets to whoever planted it)."""
    fd = os.open(path, flags | os.O_NOFOLLOW, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def write_text(path: Path, text: str) -> None:
    """Write `path` whole as 0600 (not atomic: see replace_text)."""
    with open(path, "w", opener=opener) as f:
        f.write(text)


def replace_text(path: Path, text: str) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one; written to a
    new file of a random name and renamed, never through a link (domain/secret_files.py)."""
    try:
        secret_files.replace(path, text.encode())
    except OSError as exc:
        # Named as the file meant, not the temporary copy: that is what an operator fixes.
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
