"""A command in a real terminal for tests: a detached tmux session on a private socket (its
own `-L` name, no config file), keys sent to it, its screen captured as text, every wait
bounded, and the tmux server killed at the end."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

TMUX = shutil.which("tmux")
_NAMES = itertools.count()


class Pane:
    def __init__(self, command: str, env: dict[str, str], cwd: str, width: int, height: int):
        assert TMUX is not None
        self.socket = f"pdctl-test-{os.getpid()}-{next(_NAMES)}"
        self.env = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env.setdefault("LC_ALL", "C.UTF-8")
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
            "-c", cwd, command,
        )  # fmt: skip

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [str(TMUX), "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=20,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def screen(self) -> list[str]:
        """The visible rows, as shown (trailing blanks and rows dropped)."""
        return self.tmux("capture-pane", "-p", "-t", "t").rstrip("\n").split("\n")

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height))

    def alternate_screen(self) -> bool:
        return self.tmux("display-message", "-p", "-t", "t", "#{alternate_on}").strip() == "1"

    def wait_for(
        self, check: str | Callable[[list[str]], object], timeout: float = 30.0
    ) -> list[str]:
        """The screen once `check` (a regex searched in it, or a predicate) holds."""
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = self.screen()
            text = "\n".join(lines)
            if re.search(check, text, re.M) if isinstance(check, str) else check(lines):
                return lines
            time.sleep(0.2)
        shown = "\n".join(lines)
        raise TimeoutError(f"not on screen within {timeout} s: {check!r}\n{shown}")

    def close(self) -> None:
        """Kill this pane's tmux server and remove its socket file (tmux leaves it behind)."""
        asked = [str(TMUX), "-L", self.socket]
        where = subprocess.run(
            [*asked, "display-message", "-p", "#{socket_path}"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        subprocess.run([*asked, "kill-server"], capture_output=True, timeout=20)
        if where:
            Path(where).unlink(missing_ok=True)
