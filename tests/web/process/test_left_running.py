"""What `pdctl serve` says as it stops (web/process/left_running.py): the processes that keep
running, that the next start adopts them, how to stop them; nothing when nothing runs."""

from __future__ import annotations

from web.process.left_running import live_units, note

RUNNING = {"name": "decode-0", "state": "RUNNING", "pid": 4242, "url": "http://127.0.0.1:27001"}
PROXY = {"name": "proxy", "state": "RUNNING", "pid": 4240, "url": "http://127.0.0.1:27000"}
STOPPED = {"name": "prefill-0", "state": "STOPPED", "pid": None, "url": None}


def test_names_each_live_process_with_pid_and_url():
    text = note({"mori": [PROXY, RUNNING, STOPPED], "idle": [STOPPED]}, "x.db", "http://h:1")
    assert "2 process(es) keep running" in text
    assert "mori/decode-0  pid 4242, http://127.0.0.1:27001  RUNNING" in text
    assert "mori/proxy" in text and "prefill-0" not in text and "idle" not in text
    assert "`pdctl serve --db x.db` adopts them" in text
    assert "pdctl stop NAME" in text and "(NAME: mori;" in text
    assert "curl -X POST http://h:1/api/deployments/NAME/stop" in text


def test_with_tokens_the_curl_carries_one():
    assert "Bearer $PDCTL_TOKEN" in note({"m": [RUNNING]}, "x.db", "http://h:1", tokens=True)


def test_nothing_when_nothing_runs():
    assert note({}, "x.db", "http://h:1") == ""
    assert note({"mori": [STOPPED]}, "x.db", "http://h:1") == ""
    assert live_units({"mori": [STOPPED]}) == {}
