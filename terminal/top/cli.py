"""`pdctl top [NAME]`: a deployment's live frames in the terminal, the dashboard's figures
(SLO attainment, goodput, TTFT and ITL histograms with the SLO line, KV throughput, the
instances, the latest events) from the same websocket. Keys: 1/2/3 or w the window, n/p
(or Tab, arrows) the deployment, q quit. `--once` prints one frame as text (`--json`: its
JSON) for scripts. The screen is drawn by terminal/top/view.py, fed by terminal/top/feed.py,
on the terminal of terminal/top/screen.py."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from domain.names import did_you_mean
from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, Target, resolve
from terminal.session import ServerOption, fail
from terminal.top.feed import Feed, FeedClosed, deployment_names, recent_events, unit_status
from terminal.top.format import Glyphs, glyphs_for
from terminal.top.screen import Keys, screen_for, suspendable, terminated_as_interrupt
from terminal.top.view import WINDOW_KEYS, View, render
from terminal.verbs.read import complete_names

WINDOWS = tuple(WINDOW_KEYS.values())
EVENTS_KEPT = 50
NO_FRAME_S = 2.5  # connected this long without a frame: say why, from the instances' status
STATUS_EVERY_S = 3.0
TICK_S = 0.1
ALERT_S = 5.0


class TopError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


@dataclass
class Session:
    """The live state of one `pdctl top`: which deployment and window, the feed, the view."""

    client: ApiClient
    target: Target
    names: list[str]
    index: int
    window: str
    view: View = field(init=False)
    feed: Feed = field(init=False)
    opened_at: float = 0.0
    status_at: float = 0.0
    events_for: int = 0  # the feed's connection whose missed events were fetched
    waiting: str | None = None  # why no frame comes (from the instances' status)
    alert: tuple[str, float] | None = None  # a key's failure, and until when it shows

    def __post_init__(self) -> None:
        self.view = View(self.name, self.window, position=(self.index + 1, len(self.names)))
        self.feed = Feed(self.target, self.name, self.window)
        self.opened_at = time.monotonic()

    @property
    def name(self) -> str:
        return self.names[self.index]

    def switch(self, index: int | None = None, window: str | None = None) -> None:
        """Another deployment or window: a new socket (the server sends its latest frame at
        once), the old figures cleared rather than shown under the new heading."""
        self.feed.close()
        if index is not None:
            self.index = index % len(self.names)
            self.view.events = []
        self.window = window or self.window
        self.feed = Feed(self.target, self.name, self.window)
        self.view.deployment, self.view.window = self.name, self.window
        self.view.position = (self.index + 1, len(self.names))
        self.view.frame, self.view.units, self.view.notice = None, None, None
        self.view.clock, self.waiting = "", None
        self.opened_at, self.status_at, self.events_for = time.monotonic(), 0.0, 0

    def next_deployment(self, step: int) -> None:
        try:
            names = deployment_names(self.client)
        except ApiError as err:
            self.alert = (f"cannot list the deployments: {err.message}", time.monotonic() + ALERT_S)
            return
        if not names:
            self.alert = ("no deployments any more", time.monotonic() + ALERT_S)
            return
        here = names.index(self.name) if self.name in names else -1
        self.names = names
        self.switch(index=here + step)

    def take(self, messages: list[dict[str, Any]]) -> bool:
        """Fold the feed's messages into the view; True when a frame came."""
        framed = False
        for m in messages:
            if m.get("type") == "frame":
                self.view.frame, self.view.units, self.waiting = m, None, None
                framed = True
            elif m.get("type") == "event":
                self.add_events([m])
        return framed

    def add_events(self, events: Sequence[Mapping[str, Any]]) -> None:
        seen = {e.get("id") for e in self.view.events}
        fresh = [e for e in events if e.get("id") not in seen]
        self.view.events = sorted(self.view.events + fresh, key=lambda e: e.get("id") or 0)
        self.view.events = self.view.events[-EVENTS_KEPT:]

    def tick(self, timeout: float) -> bool:
        framed = self.take(self.feed.poll(timeout))
        if self.feed.opens != self.events_for:  # (re)connected: the events it missed
            self.events_for = self.feed.opens
            self.add_events(recent_events(self.client, self.name, EVENTS_KEPT))
        self.view.status = self.feed.status
        now = time.monotonic()
        waited = now - self.opened_at
        if (
            self.view.frame is None
            and waited > NO_FRAME_S
            and now - self.status_at > STATUS_EVERY_S
        ):
            self.status_at = now
            self.view.units = unit_status(self.client, self.name)
            self.waiting = no_frame_notice(self.name, self.view.units, self.feed)
        if self.view.frame is not None and isinstance(self.view.frame.get("ts"), int | float):
            self.view.clock = time.strftime("%H:%M:%S", time.localtime(self.view.frame["ts"]))
        self.view.notice = self.notice(now)
        return framed

    def notice(self, now: float) -> str | None:
        """The line under the header: a key's failure for a moment, else why the feed is
        down (the figures below are then the last frame's), else why no frame comes."""
        if self.alert is not None and now < self.alert[1]:
            return self.alert[0]
        if self.feed.last_error:  # the header's time is the last frame's
            return self.feed.last_error
        return self.waiting if self.view.frame is None else None


IDLE_STATES = ("STOPPED", "EXITED", "FATAL")


def idle(units: Sequence[Mapping[str, Any]] | None) -> bool:
    """Nothing of the deployment runs: never started here, or every process down."""
    return not units or all(u.get("state") in IDLE_STATES for u in units)


def no_frame_notice(name: str, units: Sequence[Mapping[str, Any]] | None, feed: Feed) -> str:
    if not feed.ever_connected:
        return f"no live feed yet: {feed.last_error or 'connecting'}"
    if not units:
        return f"no frames: {name} is not running (start it: pdctl start {name})"
    if idle(units):
        return f"no frames: {name} is stopped (start it: pdctl start {name})"
    return f"waiting for {name}'s first frame"


def handle(session: Session, key: str) -> bool:
    """Act on one key; False to quit."""
    if key in ("q", "Q"):
        return False
    if key in WINDOW_KEYS and WINDOW_KEYS[key] != session.window:
        session.switch(window=WINDOW_KEYS[key])
    elif key == "w":
        session.switch(window=WINDOWS[(WINDOWS.index(session.window) + 1) % len(WINDOWS)])
    elif key in ("n", "p"):
        session.next_deployment(1 if key == "n" else -1)
    return True


def live(session: Session, interval: float, glyphs: Glyphs) -> None:
    """Until q or Ctrl-C: keys, messages and a redraw, a tick at a time."""
    screen = screen_for(sys.stdout)
    with terminated_as_interrupt(), Keys(sys.stdin) as keys, screen, suspendable(screen, keys):
        session.view.keys = keys.live
        printed_at, said = -interval, None
        while True:
            if not all(handle(session, k) for k in keys.read(TICK_S / 2)):
                return
            framed = session.tick(TICK_S)
            width, height = screen.size()
            if not screen.dumb:
                screen.draw(render(session.view, width, height, glyphs))
            elif framed and time.monotonic() - printed_at >= interval:
                printed_at = time.monotonic()
                screen.draw(render(session.view, width, None, glyphs))
            elif session.view.frame is None and session.view.notice != said:
                said = session.view.notice
                if said:
                    screen.draw([said])


def once(session: Session, as_json: bool, timeout: float, glyphs: Glyphs) -> None:
    """One frame printed (text or JSON), or a TopError saying why none came in `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.tick(min(0.5, max(0.0, deadline - time.monotonic()))):
            break
        if session.waiting and idle(session.view.units):
            break  # nothing runs that could send one: say so now, not at the timeout
    session.feed.close()
    frame = session.view.frame
    if frame is None:
        if not session.feed.ever_connected:
            raise TopError(session.feed.last_error or "no answer", exits.UNREACHABLE)
        units = unit_status(session.client, session.name)
        raise TopError(no_frame_notice(session.name, units, session.feed), exits.FAILED)
    if as_json:
        typer.echo(json.dumps(frame, indent=2))
        return
    session.view.keys, session.view.status = False, "once"
    width = shutil.get_terminal_size((80, 24)).columns
    typer.echo("\n".join(render(session.view, width, None, glyphs)))


def start(name: str | None, window: str, server: str | None) -> Session:
    if window not in WINDOWS:
        raise TopError(f"--window {window!r} is not one of {', '.join(WINDOWS)}", exits.USAGE)
    try:
        target = resolve(server)
    except ConfigProblem as exc:
        raise TopError(str(exc), exits.USAGE) from None
    client = ApiClient(target)
    try:
        names = deployment_names(client)
    except ApiError as err:
        raise TopError(err.message, err.code) from None
    if not names:
        raise TopError("no deployments yet (create one: pdctl apply -f SPEC)", exits.FAILED)
    if name is not None and name not in names:
        known = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        raise TopError(
            f"no deployment named {name!r}{did_you_mean(name, names)} (there are: {known})",
            exits.FAILED,
        )
    return Session(
        client, target, names, names.index(name) if name else first_running(client, names), window
    )


def first_running(client: ApiClient, names: list[str], most: int = 20) -> int:
    """Without a NAME: the first deployment with an instance running (of the first `most`),
    else the first one."""
    for i, name in enumerate(names[:most]):
        if any(u.get("state") == "RUNNING" for u in unit_status(client, name) or []):
            return i
    return 0


def top(
    name: Annotated[
        str | None,
        typer.Argument(
            help="The deployment (default: the first one running).",
            show_default=False,
            autocompletion=complete_names,
        ),
    ] = None,
    window: Annotated[
        str, typer.Option("--window", "-w", help="10s, 1m or 5m (keys 1, 2, 3 switch).")
    ] = "1m",
    server: ServerOption = None,
    once_: Annotated[
        bool, typer.Option("--once", help="Print one frame as plain text and exit.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: the frame's JSON.")] = False,
    timeout: Annotated[
        float, typer.Option(help="With --once: seconds to wait for a frame (0.1 to 600).")
    ] = 10.0,
    interval: Annotated[
        float,
        typer.Option(help="On a dumb terminal or a pipe: seconds between frames printed."),
    ] = 5.0,
) -> None:
    """Watch a deployment live, as its dashboard page does (keys: w window, n/p, q quit).

    SLO attainment, goodput, TTFT and ITL histograms with the SLO line, KV throughput,
    instances, events. Keys: 1/2/3 or w the window, n/p (Tab, arrows) the deployment, q quit.
    On a dumb terminal or a pipe, plain text every --interval seconds."""
    try:
        check_flags(once_, as_json, timeout, interval)
        session = start(name, window, server)
        glyphs = glyphs_for(sys.stdout.encoding)
        if once_:
            once(session, as_json, timeout, glyphs)
        else:
            live(session, interval, glyphs)
    except (TopError, FeedClosed) as err:
        fail("top", err.message, err.code)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how one leaves top: the screen is restored, exit 0


def check_flags(once_: bool, as_json: bool, timeout: float, interval: float) -> None:
    if as_json and not once_:
        raise TopError("--json needs --once (the live view is for people)", exits.USAGE)
    if not 0.1 <= timeout <= 600:
        raise TopError(f"--timeout {timeout:g} is not between 0.1 and 600 s", exits.USAGE)
    if interval < 0.5:
        raise TopError(f"--interval {interval:g} is below 0.5 s", exits.USAGE)


def register(app: typer.Typer) -> None:
    app.command("top", epilog=exits.EPILOG)(top)
