"""Suite-wide set-up."""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    """Ctrl-C reaches the processes the tests start, however the suite was started.

    A shell without job control starts a background job with SIGINT ignored, and an ignored
    signal stays ignored across exec: the tests that press Ctrl-C on a `pdctl` process (bench,
    events --follow, top) would see it ignored and fail. A process started from a terminal has
    Python's own handler, which is what they test."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
