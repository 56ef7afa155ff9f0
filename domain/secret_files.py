"""Writing a file only its user may read (a token, a spec's env, a process's state) where
another local user may have planted a symlink: the file is written to a new temporary file
(O_CREAT|O_EXCL|O_NOFOLLOW, a random name, 0600) and renamed over the path, which replaces
a link rather than following it; a path that is a symlink is refused outright.

A predictable temporary name opened without O_EXCL once let a standalone proxy's admin token
be written through a link an unprivileged user planted in a shared run dir (issue 39)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

FILE_MODE = 0o600
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def refuse_link(path: Path) -> None:
    """OSError(ELOOP) naming `path` if it is a symlink: a secret is never written through
    one, nor does it replace one (someone else put it there)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise OSError(errno.ELOOP, "refusing to write a secret through a symlink", str(path))


def create_new(path: Path) -> int:
    """A descriptor on a file created now at `path`, 0600 whatever the umask: never an old
    file, never through a link (FileExistsError / OSError ELOOP instead)."""
    fd = os.open(path, NEW_FILE, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def replace(path: Path, data: bytes) -> None:
    """`path` holds `data` whole, 0600; readers see the old file or the new one."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = create_new(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
