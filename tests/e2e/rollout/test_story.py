"""Issue 34's story replayed end to end: a MoRIIO deployment of stand-ins under `pdctl serve`,
under 4 req/s through its proxy (the real `openai` client, every request counted), changed the
ways that once wedged it. Each step asserts with the REST API and with the `pdctl` verb:

1. `count: 2` per group: a roll switch succeeds, one instance pair at a time (the forecast
   says roll is possible);
2. the four-group layout applied with `pdctl apply -f` rolls out: followed to its end, every
   process at the new revision, the old ones gone (pids dead, ports free);
3. a revision whose instances never become ready fails at wait_ready and rolls back by
   itself: the deployment serves on the previous revision;
4. `pdctl rollout abort` mid-rollout rolls back; `pdctl rollout undo` goes back a revision;
5. `pdctl serve` SIGKILLed mid-rollout and restarted: the rollout is taken over and ends within
   its deadline; switch history and measured start times survive it.

After every step: not one request lost, and no 409 without a rollout to show for it.
`STORY_NUMBERS=path` writes each step's figures there as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from harness.control_plane import ControlPlane
from tests.terminal.verbs_run import pdctl

pytestmark = [pytest.mark.e2e, pytest.mark.story]

NAME = "story"
RATE = 4.0  # requests/s through the proxy
READY_S = 25  # PDCTL_ROLLOUT_READY_S: a wait for readiness fails after this (a loaded CI box)
# start_time_scale: the tiny stand-in's modelled start (~47 s) times this, before its port
# opens (besides its own ~3-8 s of Python start on a busy box)
FAST = 0.02  # ~1 s
SLOW = 0.15  # ~7 s: a rollout slow enough to catch mid-way, well within READY_S
NEVER = 1000.0  # ~13 h: never ready


def spec(layout: str, mode: str = "read", start: float = FAST) -> dict[str, Any]:
    """`paired`: one prefill and one decode group of count 2; `four`: prefill-a, prefill-b,
    decode-a, decode-b of one each (what the issue's operator rewrote it as)."""
    if layout == "paired":
        groups = [
            {"name": "prefill", "role": "prefill", "mode": mode, "count": 2},
            {"name": "decode", "role": "decode", "mode": mode, "count": 2},
        ]
    else:
        groups = [
            {"name": f"{role}-{side}", "role": role, "mode": mode}
            for role in ("prefill", "decode")
            for side in ("a", "b")
        ]
    return {
        "name": NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": groups,
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
        "start_time_scale": start,
    }


# -- load --------------------------------------------------------------------------------------


@dataclass
class Load:
    """RATE requests/s through the proxy, each on a thread of its own (a held request does not
    slow the rate), every one counted: sent, answered in full, failed (with why)."""

    url: str
    sent: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    started: float = 0.0  # monotonic
    seconds: float = 0.0  # how long it sent, once stopped
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = openai.OpenAI(
            base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120
        )
        self._pacer = threading.Thread(target=self._pace, daemon=True)

    def start(self) -> Load:
        self.started = time.monotonic()
        self._pacer.start()
        return self

    def _pace(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            one = threading.Thread(target=self._one, daemon=True)
            with self._lock:  # counted and started at once: settled() joins only started ones
                self.sent += 1
                one.start()
                self._threads.append(one)
            next_at += 1 / RATE
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self) -> None:
        try:
            answer = self.client.completions.create(
                model="tiny",
                prompt="every change is a rollout that ends",
                max_tokens=8,
                extra_body={"ignore_eos": True},
            )
            assert answer.usage is not None and answer.usage.completion_tokens == 8, answer
        except Exception as exc:  # every way a request can be lost is counted as lost
            with self._lock:
                self.failed.append(f"{time.strftime('%X')} {type(exc).__name__}: {exc}"[:300])
            return
        with self._lock:
            self.ok += 1

    def counts(self) -> tuple[int, int, int]:
        with self._lock:
            return self.sent, self.ok, len(self.failed)

    def settled(self, timeout: float = 90.0) -> tuple[int, int, int]:
        """Once every request sent so far has its answer: (sent, ok, failed)."""
        with self._lock:
            waiting = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in waiting:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.counts()

    def stop(self) -> tuple[int, int, int]:
        """Stop sending; once every request has its answer: (sent, ok, failed)."""
        self._stop.set()
        self._pacer.join(5)
        self.seconds = time.monotonic() - self.started
        return self.settled()


# -- the control plane and the CLI ----------------------------------------------------------


@dataclass
class Story:
    plane: ControlPlane
    tmp: Path
    load: Load | None = None
    numbers: dict[str, dict[str, Any]] = field(default_factory=dict)
    _mark: tuple[int, int, int] = (0, 0, 0)
    _since: float = 0.0

    @property
    def url(self) -> str:
        return self.plane.server.url

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        return self.plane.api(method, f"/deployments/{NAME}{path}", body)

    def put(self, body: dict[str, Any]) -> tuple[int, Any]:
        return self.api("PUT", "", body)

    def cli(self, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
        return pdctl(*args, token=None, server=self.url, timeout=timeout)

    def spec_file(self, body: dict[str, Any], label: str) -> str:
        path = self.tmp / f"{label}.json"
        path.write_text(json.dumps(body))
        return str(path)

    def applied(self, body: dict[str, Any], label: str) -> dict[str, Any]:
        """`pdctl apply -f FILE --json`: its answer (the revision and the rollout it began)."""
        done = self.cli("apply", "-f", self.spec_file(body, label), "--reason", label, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def rollout(self) -> dict[str, Any]:
        """GET .../rollout: the rollout running (else the last) and each process's truth."""
        status, body = self.api("GET", "/rollout")
        assert status == 200, body
        return body

    def record(self, rollout_id: str) -> dict[str, Any]:
        status, rec = self.api("GET", f"/rollouts/{rollout_id}")
        assert status == 200, rec
        return rec

    def revision_states(self) -> dict[int, str]:
        """`pdctl history NAME --json`: each revision's state."""
        done = self.cli("history", NAME, "--json")
        assert done.returncode == 0, done.stderr
        return {r["number"]: r["state"] for r in json.loads(done.stdout)}

    def until_ended(self, rollout_id: str, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (rec := self.record(rollout_id))["state"] == "running":
            assert time.monotonic() < deadline, f"rollout still running: {rec}"
            time.sleep(0.2)
        return rec

    def until_settled(self, rollout_id: str, timeout: float = 120) -> dict[str, Any]:
        """Once it ended and its revision settled: a failed or aborted rollout says so as
        its rollback begins, and settles once that rollback ends."""
        deadline = time.monotonic() + timeout
        rec = self.until_ended(rollout_id, timeout)
        while rec["revision_state"] == "in_progress":
            assert time.monotonic() < deadline, f"revision never settled: {rec}"
            time.sleep(0.2)
            rec = self.record(rollout_id)
        return rec

    def until_at(self, rollout_id: str, prefix: str, timeout: float = 60) -> dict[str, Any]:
        """The rollout once its current step starts with `prefix` (still running)."""
        deadline = time.monotonic() + timeout
        while not str((rec := self.record(rollout_id)).get("current")).startswith(prefix):
            assert rec["state"] == "running", rec
            assert time.monotonic() < deadline, f"never at {prefix!r}: {rec}"
            time.sleep(0.1)
        return rec

    def followed(self) -> dict[str, Any]:
        """`pdctl rollout status NAME` to the end (exit 0: done, the revision applied), then
        GET .../rollout."""
        done = self.cli("rollout", "status", NAME, "--timeout", "120")
        assert done.returncode == 0, done.stdout + done.stderr
        return self.rollout()

    # -- each step's figures ---------------------------------------------------------------

    def begin(self) -> None:
        self._mark, self._since = self.counts(), time.monotonic()

    def counts(self) -> tuple[int, int, int]:
        assert self.load is not None
        return self.load.settled()

    def end(self, step: str, **figures: Any) -> None:
        """Every request of the step answered in full; no lock without a rollout."""
        sent, ok, failed = (now - then for now, then in zip(self.counts(), self._mark, strict=True))
        assert self.load is not None
        assert failed == 0 and ok == sent, (step, self.load.failed)
        no_hidden_lock(self)
        figures.update(sent=sent, ok=ok, failed=failed)
        figures["wall_s"] = round(time.monotonic() - self._since, 1)
        self.numbers[step] = figures

    def keep_for_later(self) -> None:
        """Rollouts and events next to the test's files: what a failed run leaves to read."""
        with contextlib.suppress(Exception):
            _, rollouts = self.api("GET", "/rollouts?limit=100")
            _, events = self.plane.api("GET", f"/events?deployment={NAME}&limit=500")
            failed = self.load.failed if self.load else []
            kept = {"rollouts": rollouts, "events": events, "lost": failed}
            (self.tmp / "story.json").write_text(json.dumps(kept, indent=1))


def took(rec: dict[str, Any]) -> float:
    return round((rec["ended_at"] or rec["started_at"]) - rec["started_at"], 1)


def no_hidden_lock(story: Story) -> None:
    """With no rollout running, the deployment takes a change: `pdctl apply` of what it runs
    is one that stores nothing. Never a 409 that no visible rollout explains."""
    body = story.rollout()
    assert body["rollout"] is None or body["rollout"]["state"] != "running", body["rollout"]
    assert body["revision_state"] != "in_progress", body
    status, current = story.api("GET", "")
    assert status == 200, current
    answer = story.applied(current["spec"], "unchanged")
    assert answer["revision"] == current["revision"] and answer["rollout"] is None, answer


def busy_names_the_rollout(story: Story, rollout_id: str) -> None:
    """A change while a rollout runs: 409 naming that rollout and the verb that ends it, in
    the API and in `pdctl apply` (exit 5), and GET .../rollout shows that rollout."""
    _, current = story.api("GET", "")
    other = {**current["spec"], "start_time_scale": FAST / 2}
    status, answer = story.put(other)
    assert status == 409, answer
    assert f"rollout {rollout_id} " in answer["detail"], answer
    assert f"pdctl rollout abort {NAME}" in answer["detail"], answer
    refused = story.cli("apply", "-f", story.spec_file(other, "busy"))
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert f"rollout {rollout_id} " in refused.stderr, refused.stderr
    shown = story.rollout()["rollout"]
    assert shown["id"] == rollout_id and shown["state"] == "running", shown


def pids_and_ports(story: Story, names: set[str] | None = None) -> tuple[list[int], list[int]]:
    """The pids (each engine's and its shim's) and ports of the instances (`names`, else
    all): what must be gone once the instances are."""
    pids, ports = [], []
    for name, unit in story.plane.status(NAME).items():
        if name == "proxy" or (names is not None and name not in names):
            continue
        state = story.tmp / "runs" / NAME / name / "state.json"
        with contextlib.suppress(OSError, ValueError):
            pids.append(json.loads(state.read_text()).get("shim_pid"))
        pids.append(unit["pid"])
        ports += [p for p in (unit["ports"] or {}).values() if isinstance(p, int)]
    return [p for p in pids if p], ports


def gone(pids: list[int], ports: list[int] | None = None) -> None:
    """Each pid has exited (a zombie nobody reaped counts as exited) and each port takes a
    bind (nothing holds it any more)."""
    assert pids
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state == "Z", f"pid {pid} still runs ({state})"
    for port in ports or []:
        with socket.socket() as sock:
            # as a server binds: a closed connection's TIME_WAIT does not hold the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                raise AssertionError(f"port {port} is still held: {exc}") from None


# -- the story ------------------------------------------------------------------------------


@pytest.fixture
def story(tmp_path):
    plane = ControlPlane(tmp_path, env={"PDCTL_ROLLOUT_READY_S": str(READY_S)}).start()
    told = Story(plane, tmp_path)
    try:
        yield told
    finally:
        if told.load is not None:
            told.load.stop()
        told.keep_for_later()
        with contextlib.suppress(Exception):
            plane.rolled_out(NAME, timeout=60)
        with contextlib.suppress(Exception):
            if plane.api("POST", f"/deployments/{NAME}/stop")[0] == 202:
                plane.wait(NAME, lambda us: all(u["state"] != "RUNNING" for u in us.values()), 30)
        plane.close()
        if path := os.environ.get("STORY_NUMBERS"):
            Path(path).write_text(json.dumps(told.numbers, indent=2))


@pytest.mark.timeout(420)
def test_the_story_of_issue_34_under_load_with_nothing_lost(story: Story) -> None:
    start_count_two_and_roll_a_switch(story)
    apply_the_four_group_layout(story)
    a_revision_that_never_becomes_ready_rolls_back(story)
    abort_mid_rollout_then_undo(story)
    serve_killed_mid_rollout_takes_it_over(story)
    assert story.load is not None
    sent, ok, failed = story.load.stop()
    story.numbers["total"] = {"sent": sent, "ok": ok, "failed": failed}
    assert sent >= 0.9 * RATE * story.load.seconds, (sent, story.load.seconds)  # kept its rate
    assert ok == sent and failed == 0, story.load.failed
    none_of_ours_refused(story)


def none_of_ours_refused(story: Story) -> None:
    """The proxy never refused a registration of an instance this deployment ran (each
    rollout tells it whom to expect before and after)."""
    ours = set()
    for number in story.revision_states():
        _, revision = story.api("GET", f"/revisions/{number}")
        ours |= {f":{p['http']}" for p in revision["ports"]["instances"].values()}
    _, refused = story.plane.api("GET", f"/events?deployment={NAME}&kind=registry.refused")
    assert not [e for e in refused if any(port in e["message"] for port in ours)], refused


def start_count_two_and_roll_a_switch(story: Story) -> None:
    """Step 1: `count: 2` per group rolls (one instance pair at a time), as forecast."""
    created = story.applied(spec("paired"), "paired")
    assert created["revision"] == 1, created
    started = story.cli("start", NAME, "--timeout", "60")
    assert started.returncode == 0, started.stderr
    story.plane.rolled_out(NAME)
    story.load = Load(f"http://127.0.0.1:{created['ports']['proxy']}").start()
    story.begin()

    status, told = story.api("GET", "/switch/forecast?mode=write")
    assert status == 200, told
    roll = next(f for f in told["strategies"] if f["strategy"] == "roll")
    assert roll["possible"] and roll["refused"] is None, roll
    switched = story.cli(
        *("switch", NAME, "--mode", "write", "--strategy", "roll", "--reason", "story", "--json")
    )
    assert switched.returncode == 0, switched.stdout + switched.stderr
    rec = json.loads(switched.stdout)
    assert (rec["state"], rec["kind"], rec["strategy"]) == ("done", "switch", "roll"), rec
    assert rec["held_s"] is None and rec["rejected"] == 0, rec
    applies = [s for s in rec["steps"] if s.startswith("apply")]
    assert applies == ["apply prefill-0, decode-0", "apply prefill-1, decode-1"], rec["steps"]
    body = story.followed()
    assert body["applied"] and body["revision_state"] == "applied", body
    assert {i["revision"] for i in body["instances"]} == {rec["revision"]}, body
    modes = {u["mode"] for u in story.plane.status(NAME).values() if u["role"] != "proxy"}
    assert modes == {"write"}
    story.end("1 roll switch, count 2", rollout_s=took(rec), forecast_s=roll["duration_s"])


def apply_the_four_group_layout(story: Story) -> None:
    """Step 2: the four-group layout applied to the running deployment rolls out."""
    old_pids, old_ports = pids_and_ports(story)
    story.begin()
    four = story.spec_file(spec("four", "write"), "four-groups")
    dry = story.cli("apply", "-f", four, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "would roll out by roll: start prefill-a-0, " in dry.stdout, dry.stdout
    applied = story.cli("apply", "-f", four, "--reason", "four groups")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    said = applied.stdout.splitlines()
    assert said[0] == f"{NAME}: revision 2 -> 3", said
    assert said[-1].startswith("rolling out revision 3 by roll: start prefill-a-0, "), said
    assert "; stop prefill-0, prefill-1, decode-0, decode-1;" in said[-1], said
    rec = story.rollout()["rollout"]
    assert (rec["kind"], rec["strategy"], rec["revision"]) == ("apply", "roll", 3), rec
    new = {"prefill-a-0", "prefill-b-0", "decode-a-0", "decode-b-0"}
    assert set(rec["changes"]["start"]) == new, rec["changes"]
    assert set(rec["changes"]["stop"]) == {"prefill-0", "prefill-1", "decode-0", "decode-1"}
    assert rec["changes"]["restart"] == [] and rec["changes"]["keep"] == ["proxy"], rec
    body = story.followed()
    done = body["rollout"]
    assert done["id"] == rec["id"] and done["state"] == "done", done
    assert body["applied"] and body["drifted"] == [], body
    assert body["revision_state"] == "applied", body
    assert body["desired_revision"] == 3, body
    assert {i["name"] for i in body["instances"]} == {"proxy", *new}, body["instances"]
    for inst in body["instances"]:
        assert inst["revision"] == 3, inst
        assert inst["state"] == "RUNNING" and not inst["drifted"], inst
    gone(old_pids, old_ports)
    assert story.revision_states()[3] == "applied"
    story.end("2 apply four groups", rollout_s=took(done))


def a_revision_that_never_becomes_ready_rolls_back(story: Story) -> None:
    """Step 3: its rollout fails at wait_ready, naming it, and rolls back by itself."""
    before = story.rollout()
    story.begin()
    answer = story.applied(spec("four", "write", start=NEVER), "never-ready")
    rec = answer["rollout"]
    assert rec is not None and rec["strategy"] == "roll", answer
    at = story.until_at(rec["id"], "wait_ready")
    slow = set(at["current"].removeprefix("wait_ready ").split(", "))
    slow_pids, _ = pids_and_ports(story, slow)
    failed = story.until_settled(rec["id"], timeout=READY_S + 90)
    assert failed["state"] == "failed" and failed["failed_step"] == at["current"], failed
    assert failed["error"].startswith(f"{at['current']}: not ready"), failed
    assert failed["revision_state"] == "rolled_back", failed
    back = story.record(failed["rolled_back_by"])
    assert (back["kind"], back["state"], back["rollback_of"]) == ("rollback", "done", rec["id"])
    body = story.rollout()
    assert body["desired_revision"] == before["desired_revision"], body
    assert body["applied"] and body["drifted"] == [], body
    _, current = story.api("GET", "")
    assert current["spec"]["start_time_scale"] == FAST, current
    gone(slow_pids)  # the instances that never became ready do not linger
    assert story.revision_states()[answer["revision"]] == "rolled_back"
    story.end(
        "3 never ready, rolled back",
        rollout_s=took(failed),
        rollback_s=took(back),
        failed_step=failed["failed_step"],
    )


def abort_mid_rollout_then_undo(story: Story) -> None:
    """Step 4: `pdctl rollout abort` mid-way rolls back; `pdctl rollout undo` goes back."""
    four = story.rollout()
    story.begin()
    # back to count 2, with starts slow enough to catch mid-way
    answer = story.applied(spec("paired", "write", start=SLOW), "slow-pairs")
    rec = answer["rollout"]
    assert rec is not None, answer
    story.until_at(rec["id"], "wait_ready")
    busy_names_the_rollout(story, rec["id"])
    aborted = story.cli("rollout", "abort", NAME, "--reason", "too slow")  # follows the rollback
    assert aborted.returncode == 0, aborted.stdout + aborted.stderr
    ended = story.until_settled(rec["id"])
    assert ended["state"] == "aborted" and "too slow" in ended["aborted_by"], ended
    assert ended["revision_state"] == "rolled_back", ended
    back = story.record(ended["rolled_back_by"])
    assert (back["kind"], back["state"]) == ("rollback", "done"), back
    body = story.rollout()
    assert body["desired_revision"] == four["desired_revision"], body
    assert body["applied"] and body["drifted"] == [], body
    aborted_figures = {"aborted_rollout_s": took(ended), "rollback_s": took(back)}

    # undo: the applied revision before the four groups (count 2, write), as a new revision
    undone = story.cli("rollout", "undo", NAME, "--reason", "back to pairs")  # follows it
    assert undone.returncode == 0, undone.stdout + undone.stderr
    body = story.followed()
    rec = body["rollout"]
    assert (rec["kind"], rec["state"]) == ("undo", "done"), rec
    assert body["desired_revision"] == answer["revision"] + 1, body
    assert body["applied"] and body["drifted"] == [], body
    _, current = story.api("GET", "")
    assert [g["count"] for g in current["spec"]["groups"]] == [2, 2], current
    assert current["spec"]["start_time_scale"] == FAST, current
    assert story.revision_states()[current["revision"]] == "applied"
    story.end("4 abort, then undo", undo_s=took(rec), **aborted_figures)


def serve_killed_mid_rollout_takes_it_over(story: Story) -> None:
    """Step 5: `pdctl serve` SIGKILLed mid-rollout; the next one takes the rollout over and
    it ends within its deadline; switch history and measured starts survive."""
    old_pids, old_ports = pids_and_ports(story)
    story.begin()
    answer = story.applied(spec("four", "write", start=SLOW), "four-again")
    rec = story.until_at(answer["rollout"]["id"], "wait_ready")
    story.plane.server.kill()
    story.plane.server.proc.wait(10)
    story.plane.start()
    restarted = time.monotonic()
    status, switches = story.api("GET", "/switches")
    assert status == 200 and [s["kind"] for s in switches] == ["switch"], switches
    status, told = story.api("GET", "/switch/forecast?mode=read")
    assert status == 200, told
    assert {s["source"] for s in told["starts"].values()} == {"measured"}, told["starts"]
    body = story.followed()
    ended_in = round(time.monotonic() - restarted, 1)
    done = story.record(rec["id"])
    assert (done["state"], done["resumed"]) == ("done", 1), done
    assert done["ended_at"] <= done["deadline_at"], done
    assert done["revision_state"] == "applied", done
    assert body["rollout"]["id"] == rec["id"], body
    assert body["applied"] and body["drifted"] == [], body
    assert body["desired_revision"] == answer["revision"], body
    gone(old_pids, old_ports)
    story.end("5 serve killed mid-rollout", rollout_s=took(done), restart_to_end_s=ended_in)
