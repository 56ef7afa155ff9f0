"""The admin token of a standalone `pdctl proxy` started without one: generated, and written
to a file only its user can read, so /admin is never open (its routes pause groups and add or
remove instances). Under `pdctl serve` the controller generates it and hands it over in the
environment (PDCTL_ADMIN_TOKEN), never in argv, which every local user can read."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from domain import secret_files


def runtime_dir(given: Path | None = None) -> Path:
    """Where a standalone proxy keeps its token: `given` (its settings' runtime_dir, from
    PDCTL_RUNTIME_DIR), else the user's runtime directory (XDG_RUNTIME_DIR), else
    ~/.cache/pdctl/run."""
    if given:
        return given.absolute()
    if xdg := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(xdg) / "pdctl"
    return Path.home() / ".cache" / "pdctl" / "run"


def write_generated_token(path: Path) -> str:
    """A new token in `path` (0600, its folder 0700), replacing an older one atomically."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A random temporary name, created O_EXCL|O_NOFOLLOW, renamed over `path`; `path` itself
    # a symlink is refused: a shared run dir may hold links another user planted.
    secret_files.replace(path, (token + "\n").encode())
    return token
