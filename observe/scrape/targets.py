"""One scraped endpoint (a proxy or an engine): its /metrics read with a size bound, and its
counters, windows and up/down state carried from scrape to scrape."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import aiohttp

from observe.build import TargetState, tracked
from observe.frames import WINDOW_SECONDS
from observe.metrics.samples import parse
from observe.metrics.windows import CounterTrack, Snapshots, advance

log = logging.getLogger("pdctl.observe")

DOWN_AFTER_MISSES = 2
# A /metrics page larger than this is not read (vLLM's are well under 1 MiB): a hostile or
# broken endpoint cannot make the control plane hold gigabytes.
MAX_METRICS_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Scrape:
    """One look at /metrics: its text, or why there is none (`refused`: the port is closed)."""

    text: str | None = None
    refused: bool = False
    why: str | None = None


async def fetch_metrics(session: aiohttp.ClientSession, url: str, timeout_s: float) -> Scrape:
    try:
        async with session.get(url + "/metrics", allow_redirects=False) as resp:
            body = await bounded_body(resp, MAX_METRICS_BYTES)
            if resp.status != 200:
                return Scrape(why=f"/metrics answered {resp.status}")
            if len(body) > MAX_METRICS_BYTES:
                return Scrape(why=f"/metrics larger than {MAX_METRICS_BYTES} bytes")
            return Scrape(text=body.decode("utf-8", errors="replace"))
    except aiohttp.ClientConnectorError as err:
        return Scrape(refused=True, why=f"connection refused ({err.os_error})")
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        why = (
            f"no answer within {timeout_s:g} s"
            if isinstance(err, TimeoutError)
            else str(err) or type(err).__name__
        )
        return Scrape(why=why)


async def bounded_body(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, read until its end or one byte past `limit` (then the rest is left)."""
    body = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > limit:
            break
    return bytes(body)


@dataclass
class ScrapeTarget:
    track: CounterTrack | None = None
    snapshots: Snapshots = field(default_factory=Snapshots)
    gauges: dict = field(default_factory=dict)
    up: bool = False
    missed: int = 0  # scrapes failed in a row
    seen_up: bool | None = None  # attached: the last answer an event told (None: none yet)
    why: str | None = None  # why the last scrape failed

    def state(self) -> TargetState:
        return TargetState(
            self.up,
            self.gauges if self.up else {},
            {w: self.snapshots.delta(s) for w, s in WINDOW_SECONDS.items()},
        )

    def take(self, scrape: Scrape | None, attached: bool, now: float, where: str) -> None:
        """Step by one scrape (None: the unit was not scraped, it does not run)."""
        if scrape is not None and scrape.why is not None:
            self.why = scrape.why
        read = None
        if scrape is not None and scrape.text is not None:
            try:
                read = parse(scrape.text, keep=tracked)
            except ValueError as err:
                log.warning("%s: unreadable /metrics: %s", where, err)
        if read is None:
            # One late answer from a busy engine is not "down": its last gauges stand for
            # one more tick; two misses in a row are.
            self.missed += 1
            # An attached instance whose port is closed is gone now, not late: its event
            # comes within one probe period.
            gone = scrape is not None and scrape.refused and attached
            self.up = self.up and self.missed < DOWN_AFTER_MISSES and not gone
            latest = self.snapshots.latest()
            self.snapshots.add(now, latest[1] if latest else {})  # windows move on
        else:
            self.up, self.gauges, self.missed = True, read.gauges, 0
            self.track = advance(self.track, read.counters)
            self.snapshots.add(now, self.track.totals)
