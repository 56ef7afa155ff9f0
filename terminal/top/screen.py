"""The terminal under `pdctl top`: a full screen (plain ANSI: the alternate screen, no
autowrap, the cursor hidden, keys read unbuffered, redrawn line by line, resize noticed) or,
on a dumb terminal or a pipe, plain text with no control codes at all. Either way the
terminal is given back as it was, on q, Ctrl-C, SIGTERM or an error, and for the while a
Ctrl-Z keeps it stopped.

Plain ANSI rather than curses: the renderer's lines go out unchanged (the same lines `--once`
and a dumb terminal print), there is no terminfo to be missing or wrong, and curses' refusal
to write the bottom-right cell and its own wrapping are not ours to work around."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import termios
import tty
from collections.abc import Iterator, Mapping
from typing import TextIO

ENTER = "\x1b[?1049h\x1b[?25l\x1b[?7l\x1b[2J"  # alternate screen, cursor hidden, no autowrap
LEAVE = "\x1b[?7h\x1b[?25h\x1b[?1049l"
DUMB_TERMS = ("", "dumb", "unknown")

# Keys as the loop reads them; arrows and Tab are the same as n/p.
KEY_NAMES = {"\x1b[C": "n", "\x1b[D": "p", "\t": "n", "\x1b[Z": "p"}


def is_dumb(stdout: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """No cursor control: TERM is dumb (or unset), or stdout is not a terminal."""
    env = os.environ if env is None else env
    return env.get("TERM", "") in DUMB_TERMS or not stdout.isatty()


def split_keys(data: str) -> list[str]:
    """Key presses in what one read returned: single characters, escape sequences whole."""
    keys, i = [], 0
    while i < len(data):
        if data[i] == "\x1b" and i + 2 < len(data) + 1 and data[i + 1 : i + 2] == "[":
            j = i + 2
            while j < len(data) and not data[j].isalpha() and data[j] != "~":
                j += 1
            seq = data[i : j + 1]
            keys.append(KEY_NAMES.get(seq, seq))
            i = j + 1
        else:
            keys.append(KEY_NAMES.get(data[i], data[i]))
            i += 1
    return keys


class Keys:
    """Key presses from stdin when it is a terminal (cbreak: no echo, no line buffering, and
    Ctrl-C still a signal); nothing otherwise."""

    def __init__(self, stdin: TextIO) -> None:
        self.fd = stdin.fileno() if stdin.isatty() else None
        self._saved: list | None = None

    @property
    def live(self) -> bool:
        return self.fd is not None

    def __enter__(self) -> Keys:
        if self.fd is not None:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *_: object) -> None:
        if self.fd is not None and self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def read(self, timeout: float) -> list[str]:
        if self.fd is None:
            return []
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        data = os.read(self.fd, 256)
        return split_keys(data.decode("utf-8", "replace")) if data else []


class FullScreen:
    """The alternate screen, redrawn only where a line changed; a resize redraws it all."""

    dumb = False

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._shown: list[str] = []
        self.resized = False

    def __enter__(self) -> FullScreen:
        self._previous = signal.signal(signal.SIGWINCH, self._on_resize)
        self.out.write(ENTER)
        self.out.flush()
        return self

    def __exit__(self, *_: object) -> None:
        self.out.write(LEAVE)
        self.out.flush()
        signal.signal(signal.SIGWINCH, self._previous)

    def _on_resize(self, *_: object) -> None:
        self.resized = True

    def pause(self) -> None:
        self.out.write(LEAVE)
        self.out.flush()

    def resume(self) -> None:
        self.out.write(ENTER)
        self.out.flush()
        self.resized = True  # whatever ran meanwhile drew over it: redraw it all

    def size(self) -> tuple[int, int | None]:
        try:
            cols, rows = os.get_terminal_size(self.out.fileno())
        except OSError:
            cols, rows = 80, 24
        return max(1, cols), max(1, rows)

    def draw(self, lines: list[str]) -> None:
        if self.resized:
            self.resized, self._shown = False, []
            self.out.write("\x1b[2J")
        parts = []
        for row, line in enumerate(lines):
            if row >= len(self._shown) or self._shown[row] != line:
                # Erased before it is written: an erase after a line that fills the width would
                # take its last character (the cursor waits on the last column).
                parts.append(f"\x1b[{row + 1};1H\x1b[2K{line}")
        if len(lines) < len(self._shown):
            parts.append(f"\x1b[{len(lines) + 1};1H\x1b[J")
        self._shown = list(lines)
        if parts:
            self.out.write("".join(parts))
            self.out.flush()


class PlainText:
    """A dumb terminal or a pipe: each drawing printed whole, then a blank line."""

    dumb = True

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __enter__(self) -> PlainText:
        return self

    def __exit__(self, *_: object) -> None:
        self.out.flush()

    def size(self) -> tuple[int, int | None]:
        return max(1, shutil.get_terminal_size((80, 24)).columns), None

    def pause(self) -> None:
        self.out.flush()

    def resume(self) -> None:
        pass

    def draw(self, lines: list[str]) -> None:
        self.out.write("\n".join(lines) + "\n\n")
        self.out.flush()


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the terminal is restored either way."""

    def raise_interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def suspendable(screen: FullScreen | PlainText, keys: Keys) -> Iterator[None]:
    """Ctrl-Z gives the terminal back as it was before the process stops, and takes it again
    (redrawn) when `fg` resumes it."""

    def stop(*_: object) -> None:
        keys.__exit__()
        screen.pause()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until SIGCONT
        signal.signal(signal.SIGTSTP, stop)
        keys.__enter__()
        screen.resume()

    previous = signal.signal(signal.SIGTSTP, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous)


def screen_for(out: TextIO = sys.stdout) -> FullScreen | PlainText:
    return PlainText(out) if is_dumb(out) else FullScreen(out)
