"""Screenshots of `make run`'s first screen after one minute: a real `pdctl serve` with the
demo (harness/demo_run.py) on a temporary database, the deployments list at / and the pair's
deployment pages in headless Chromium (Debian's, as tests/e2e/dashboard/test_browser.py drives it),
saved in artifacts/ (git-ignored), and the frames' figures beside them.

    python -m harness.demo_screens [--seconds 60] [--out artifacts]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from harness.control_plane import ControlPlane
from harness.demo_run import DEMO_ENV, trade_lines, wait_filled
from harness.processes import ROOT
from services.demo.trade import TRADE_NAMES

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


def shoot(base_url: str, out: Path) -> list[Path]:
    """The first screen, then each of the pair's pages once their live charts drew."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
            page.goto(base_url + "/")
            page.wait_for_selector(".trade-claim", timeout=30_000)
            shots.append(out / "demo-first-screen.png")
            page.screenshot(path=str(shots[-1]), full_page=False)
            for name in TRADE_NAMES:
                page.goto(f"{base_url}/deployments/{name}")
                time.sleep(4)  # the websocket's history and a few frames
                shots.append(out / f"demo-{name}.png")
                page.screenshot(path=str(shots[-1]), full_page=True)
        finally:
            browser.close()
    return shots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        print("demo_screens: needs Debian's chromium (make system-deps)", file=sys.stderr)
        return 2
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="pdctl-demo-")), env=DEMO_ENV)
    try:
        plane.start()
        wait_filled(plane, args.seconds)
        lines = trade_lines(plane.server.url)  # the figures the screenshots show
        for path in shoot(plane.server.url, args.out):
            print(f"wrote {path}")
        print("\n".join(lines))
    finally:
        plane.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
