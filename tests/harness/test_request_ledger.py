"""harness/request_ledger.py: which failed requests an excuse covers, and a real ledger's
count against a small HTTP server on loopback."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.request_ledger import Excuse, RequestLedger, Sent, unexplained


def test_a_failure_counts_as_lost_unless_an_excuse_covers_its_time_and_error():
    ok = Sent(1, 0.0, 1.0, True)
    early = Sent(2, 1.0, 1.5, False, "502: decode leg failed")
    inside = Sent(3, 4.0, 4.1, False, "503: no available decode instance")
    after = Sent(4, 9.0, 9.1, False, "503: no available decode instance")
    other = Sent(5, 4.0, 4.1, False, "502: prefill leg failed")
    excuses = [Excuse(3.0, 5.0, "decode-1 down", only="no available decode instance")]
    assert unexplained([ok, early, inside, after, other], excuses) == [early, after, other]
    # In flight across the start of a window: covered (it was there when the kill came).
    spanning = Sent(6, 2.0, 3.5, False, "ConnectionReset")
    assert unexplained([spanning], [Excuse(3.0, 3.2, "SIGKILL proxy")]) == []
    # One of several errors: both roles down, the proxy names both.
    both = Sent(7, 4.0, 4.1, False, "503: no available prefill or decode instance")
    either = ("no available decode instance", "no available prefill or decode instance")
    assert unexplained([both, other], [Excuse(3.0, 5.0, "decode-1 down", only=either)]) == [other]


class Flaky(BaseHTTPRequestHandler):
    """Every third completion fails with a 503."""

    count = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Flaky.count += 1
        status = 503 if Flaky.count % 3 == 0 else 200
        body = json.dumps({"choices": [{"text": "x"}]} if status == 200 else {"error": "busy"})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_the_ledger_records_every_request_it_sent_and_how_it_ended():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ledger = RequestLedger(f"http://127.0.0.1:{server.server_port}", rate=20).start()
        time.sleep(0.6)
        sent = ledger.stop()
    finally:
        server.shutdown()
        server.server_close()
    assert len(sent) >= 6 and sorted(s.number for s in sent) == list(range(1, len(sent) + 1))
    failed = [s for s in sent if not s.ok]
    assert failed and all(s.error and s.error.startswith("503") for s in failed)
    assert all(s.started <= s.ended for s in sent)
