"""A model-based test of a deployment's whole lifecycle (issue 34, deliverable 8): Hypothesis'
stateful testing drives random sequences of operator actions and faults against a real
`pdctl serve` running one stand-in MoRIIO deployment under a small bounded load, and checks
after every step that the rollout engine keeps its promises.

Operator actions (each through the REST API, as `pdctl` sends them):
  apply    PUT a changed spec: the layout toggled between one prefill and one decode group of
           `count: 2` and four groups of one (prefill-a/-b, decode-a/-b), or every group's
           max_num_seqs toggled; by roll, hold, recreate or the default strategy
  restart  the whole deployment or one instance, by roll, hold, recreate or the default
  switch   read <-> write by roll, hold or keep-serving (409 where the layout forbids it:
           the switch forecast must have said so)
  abort    the running rollout (409 when none runs: then none may show as running)
  undo     back to the applied revision before the desired one
  settle   wait for the running rollout to end, then check the deployment converged
Faults (the test's own, each with a window in which requests through it may fail):
  SIGKILL of a prefill or decode, of the proxy, and of `pdctl serve` itself (then started
  again on the same database and run dir, as an operator would).
Each action that begins a rollout either waits for it to end or lets the next step find it
running (a change then gets a 409 that must name the rollout and `pdctl rollout abort`).
  move     one instance to the other role by runtime role switching (a NixlConnector
           deployment started with role_switch; a 422 naming `instance` when it is the last
           of its role)
Each sequence first picks its deployment's connector: MoRIIO (read/write switches) or NIXL
(role moves; its switch rule does not apply). The advisor's apply is left out: its verdicts
need a minute of live windows per step (tests/e2e/rollout/test_proposals.py); it goes through the
same store-and-roll-out path as apply.

Invariants, after every step:
 1. Every rollout ends within its deadline: a running one is never past its record's
    `deadline_at` (+ SLACK_S for its end's own bookkeeping), nor at one step longer than
    that step's deadline (since the test first saw it there); an ended one ended by it (a
    failed or aborted one that rolled back: by its rollback's); at most one record is
    `running`, and it is the one GET .../rollout shows.
 2. No request lost: every request the load sent succeeded, except those whose time in flight
    overlaps an excuse: [kill, kill + KILL_GRACE_S] for a SIGKILL of a prefill or decode (the
    requests it was serving, and those routed to it before the proxy saw it gone), and until
    it runs again for the proxy's 503 "no available <its role> instance" (a rollout may have
    drained the others of its group: then it was the last one); [kill, first completion served
    again] for a SIGKILL of the proxy (nothing listens meanwhile); a recreate rollout from its
    begin until it (and its rollback) ended and every process runs again: it is documented
    to refuse requests meanwhile.
    A `pdctl serve` SIGKILL excuses nothing: it is not on the request path.
 3. The status matches the processes (/proc): every RUNNING row's pid is alive and listens on
    its port, and every process a shim runs under the run dir is a row the status shows, with
    that pid when RUNNING (within TRUTH_S: the supervisor learns of a kill by probing).
 4. No 409 lock without a visible rollout that can be aborted: a change refused as busy names
    the rollout and `pdctl rollout abort lifecycle`; GET .../rollouts/{id} shows it running (or
    ended meanwhile), and POST .../rollout/abort is accepted or it ends by itself within its
    deadline.
 5. Once no rollout runs (settle): every process is RUNNING within SETTLE_S, the desired
    revision is not left `in_progress`, GET .../rollout says `applied` with every process at
    the desired revision, or names the drifted ones, each with why; and the proxy holds no
    group, drains no running instance and has none serving whole requests.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, note, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post
from harness.request_ledger import Excuse, RequestLedger, Sent, unexplained
from tests.model.process_truth import children, mismatches, shims

NAME = "lifecycle"
MORI, NIXL = "MoRIIOConnector", "NixlConnector"
# PDCTL_ROLLOUT_READY_S: a wait for readiness fails after it (+ the call's 30 s). Stand-ins are
# ready within seconds; on two busy cores (make test's workers) a start took 16 s.
READY_S = 60
SLACK_S = 10.0  # past deadline_at: a rollout's end tells the proxy what runs and settles
SETTLE_S = 45.0  # after a rollout, for every process to run again (restarts after kills)
TRUTH_S = 20.0  # status and /proc may disagree this long after a kill
KILL_GRACE_S = 2.0
RATE = 3.0  # requests per second
PROXY_BACK_S = 90.0

LAYOUTS = ("pair", "four")
STRATEGY = st.sampled_from([None, "roll", "hold", "recreate"])
REFUSED_STRATEGY = ("only recreate applies", "use hold", "keep-serving is for", "two or more")


def spec(
    layout: str = "pair",
    mode: str | None = "read",
    max_num_seqs: int | None = None,
    connector: str = MORI,
) -> dict:
    """The deployment: one prefill and one decode group of two, or four groups of one; MoRIIO
    in `mode`, or NIXL started for runtime role switching (no mode)."""
    if layout == "pair":
        groups = [
            {"name": "prefill", "role": "prefill", "count": 2},
            {"name": "decode", "role": "decode", "count": 2},
        ]
    else:
        names = ("prefill-a", "prefill-b", "decode-a", "decode-b")
        groups = [{"name": n, "role": n.split("-")[0]} for n in names]
    for group in groups:
        if connector == MORI:
            group["mode"] = mode
        if max_num_seqs is not None:
            group["max_num_seqs"] = max_num_seqs
    out = {
        "name": NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": connector,
        "groups": groups,
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }
    if connector == MORI:
        out["prefix_caching"] = False
    else:
        out["role_switch"] = {}
    return out


def layout_of(current: dict) -> str:
    return "pair" if len(current["groups"]) == 2 else "four"


def changed(current: dict, what: str) -> dict:
    """`current` with its layout toggled, or every group's max_num_seqs toggled. A new layout
    is written afresh, as an operator would: no instance of it moved to another role."""
    groups = current["groups"]
    mode, seqs = groups[0].get("mode"), groups[0].get("max_num_seqs")
    if what == "layout":
        other = "four" if layout_of(current) == "pair" else "pair"
        fresh = spec(other, mode, seqs, current["connector"])
        return {**copy.deepcopy(current), "groups": fresh["groups"], **_role_switch(fresh)}
    out = copy.deepcopy(current)
    for group in out["groups"]:
        group["max_num_seqs"] = None if seqs else 64
    return out


def _role_switch(fresh: dict) -> dict:
    return {"role_switch": fresh["role_switch"]} if "role_switch" in fresh else {}


def serving_roles(current: dict) -> dict[str, str]:
    """Each instance's serving role in spec `current`: its group's unless moved."""
    moved = (current.get("role_switch") or {}).get("serving") or {}
    return {
        f"{g['name']}-{i}": moved.get(f"{g['name']}-{i}", g["role"])
        for g in current["groups"]
        for i in range(g.get("count") or 1)
    }


class Lifecycle(RuleBasedStateMachine):
    """One deployment under `pdctl serve`, its load, and the windows the test excuses."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.t0 = time.monotonic()
        self.wall_offset = time.time() - time.monotonic()  # wall = monotonic + offset
        self.excuses: list[Excuse] = []
        self.recreates: dict[str, float] = {}  # rollout id -> when it began (monotonic)
        self.down: dict[str, tuple[int, float, str]] = {}  # killed -> (pid, when, role)
        self.steps_seen: dict[tuple[str, int, int], float] = {}  # (id, resumed, step) -> when
        self.journal = root / "journal.txt"
        self.plane = ControlPlane(root, env={"PDCTL_ROLLOUT_READY_S": str(READY_S)})
        self.ledger: RequestLedger | None = None
        self.connector = MORI
        self.proxy = ""
        try:
            self.plane.start()
        except BaseException:
            self.close()
            raise

    @initialize(connector=st.sampled_from([MORI, NIXL]))
    def deploy(self, connector: str) -> None:
        """Create and start the deployment, then put it under load."""
        self.connector = connector
        status, created = self.plane.api("POST", "/deployments", spec(connector=connector))
        assert status == 201, created
        self.proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
        status, body = self.plane.api("POST", f"/deployments/{NAME}/start")
        assert status == 202, body
        self.plane.running(NAME)
        self.plane.rolled_out(NAME)
        self.ledger = RequestLedger(self.proxy, RATE).start()
        self.say(f"started {NAME} ({connector}, pair) under {RATE:g} req/s; run dir {self.root}")

    # -- operator actions ------------------------------------------------------------------

    @rule(what=st.sampled_from(["layout", "max_num_seqs"]), strategy=STRATEGY, wait=st.booleans())
    def apply(self, what: str, strategy: str | None, wait: bool) -> None:
        new = changed(self.desired(), what)
        query = f"?strategy={strategy}" if strategy else ""
        status, body = self.api("PUT", f"/deployments/{NAME}{query}", new)
        self.say(f"PUT {what} -> {layout_of(new)} ({strategy or 'default'}): {status}")
        if status == 200:
            assert body["rollout"] is not None, body  # it runs: a change is rolled out
            self.began(body["rollout"], wait)
        else:
            self.refused(status, body, strategy)

    @rule(which=st.none() | st.integers(0, 3), strategy=STRATEGY, wait=st.booleans())
    def restart(self, which: int | None, strategy: str | None, wait: bool) -> None:
        instances = sorted(n for n, u in self.plane.status(NAME).items() if u["role"] != "proxy")
        instance = instances[which % len(instances)] if which is not None and instances else None
        query = "&".join(
            f"{k}={v}" for k, v in (("instance", instance), ("strategy", strategy)) if v
        )
        before = self.last_rollout_id()
        status, body = self.api("POST", f"/deployments/{NAME}/restart?{query}")
        self.say(f"restart {instance or 'all'} ({strategy or 'default'}): {status}")
        if status == 202:
            rollout = self.rollout()["rollout"]
            assert rollout is not None and rollout["id"] != before, rollout
            self.began(rollout, wait)
        else:
            self.refused(status, body, strategy)

    @precondition(lambda self: self.connector == MORI)
    @rule(strategy=st.sampled_from(["roll", "hold", "keep-serving"]), wait=st.booleans())
    def switch(self, strategy: str, wait: bool) -> None:
        mode = "write" if self.desired()["groups"][0]["mode"] == "read" else "read"
        _, forecast = self.plane.api("GET", f"/deployments/{NAME}/switch/forecast?mode={mode}")
        said = {f["strategy"]: f["possible"] for f in forecast["strategies"]}
        body = {"mode": mode, "strategy": strategy, "reason": "model"}
        status, answer = self.api("POST", f"/deployments/{NAME}/switch", body)
        self.say(f"switch to {mode} by {strategy}: {status}")
        if status == 202:
            assert said.get(strategy), (forecast, answer)  # the forecast said it could
            self.began(answer, wait)
            return
        detail = str(answer.get("detail"))
        if status == 409 and "holds it" not in detail and said.get(strategy) is False:
            return  # refused, as the forecast said it would be
        if status == 409 and "every instance must be RUNNING" in detail:
            return  # after a kill, until the supervisor restarted it
        self.refused(status, answer, None)

    @precondition(lambda self: self.connector == NIXL)
    @rule(which=st.integers(0, 3))
    def move(self, which: int) -> None:
        """Move one instance to the other role: it answers once the instance serves it."""
        roles = serving_roles(self.desired())
        instance = sorted(roles)[which % len(roles)]
        role = "decode" if roles[instance] == "prefill" else "prefill"
        body = {"instance": instance, "role": role, "reason": "model", "drain_timeout_s": 30}
        status, answer = self.api("POST", f"/deployments/{NAME}/role-moves", body)
        self.say(f"move {instance} to {role}: {status} {answer.get('revision', '')}")
        if status == 200:
            assert (answer["from"], answer["to"]) == (roles[instance], role), answer
            assert serving_roles(self.desired())[instance] == role, self.desired()
            return
        detail = str(answer.get("detail"))
        if status == 422:  # the last of its role: the refusal names the field
            assert "last" in detail and "instance" in json.dumps(answer), answer
            return
        if status == 409 and "is not running" in detail:
            return  # after a kill, until the supervisor restarted it
        self.refused(status, answer, None)

    @rule()
    def abort(self) -> None:
        status, body = self.api("POST", f"/deployments/{NAME}/rollout/abort?reason=model")
        self.say(f"abort: {status} {body.get('id', body.get('detail', ''))}")
        if status == 202:
            self.settle()
            record = self.find(body["id"])
            assert record["state"] == "aborted", record
            return
        assert status == 409, body
        detail = str(body["detail"])
        if "ends by itself" in detail:  # ending, or rolling back: it must end in time
            self.settle()
            return
        assert "nothing to abort" in detail, body
        running = self.rollout()["rollout"]
        assert running is None or running["state"] != "running", running

    @rule(strategy=STRATEGY, wait=st.booleans())
    def undo(self, strategy: str | None, wait: bool) -> None:
        body = {"reason": "model", **({"strategy": strategy} if strategy else {})}
        status, answer = self.api("POST", f"/deployments/{NAME}/rollout/undo", body)
        self.say(f"undo ({strategy or 'default'}): {status} revision {answer.get('revision')}")
        if status == 202:
            if answer["rollout"] is not None:
                self.began(answer["rollout"], wait)
            return
        if status == 409 and "no applied revision before" in str(answer.get("detail")):
            return
        self.refused(status, answer, strategy)

    @rule()
    def settle_now(self) -> None:
        self.settle()

    # -- faults ----------------------------------------------------------------------------

    @rule(which=st.integers(0, 3))
    def kill_instance(self, which: int) -> None:
        units = self.plane.status(NAME)
        serving = sorted(
            n for n, u in units.items() if u["role"] != "proxy" and u["state"] == "RUNNING"
        )
        if not serving:
            self.say("kill instance: none runs")
            return
        victim = serving[which % len(serving)]
        at = self.kill(units[victim]["pid"])
        if at is None:
            self.say(f"kill {victim}: pid {units[victim]['pid']} is gone already")
            return
        self.excuses.append(Excuse(at, at + KILL_GRACE_S, f"SIGKILL {victim}"))
        self.down[victim] = (units[victim]["pid"], at, units[victim]["role"])
        self.say(f"SIGKILL {victim} (pid {units[victim]['pid']})")

    @rule()
    def kill_proxy(self) -> None:
        unit = self.plane.status(NAME).get("proxy")
        if unit is None or unit["state"] != "RUNNING":
            self.say("kill proxy: it does not run")
            return
        at = self.kill(unit["pid"])
        if at is None:
            self.say(f"kill proxy: pid {unit['pid']} is gone already")
            return
        self.excuses.append(Excuse(at, float("inf"), "SIGKILL proxy"))
        back = self.serving_again(at)
        self.excuses[-1] = Excuse(at, back + 0.5, "SIGKILL proxy")
        self.say(f"SIGKILL proxy (pid {unit['pid']}); serving again after {back - at:.1f} s")

    @rule()
    def kill_serve(self) -> None:
        self.plane.server.kill()
        self.say("SIGKILL pdctl serve")
        self.plane.start()
        self.say("pdctl serve started again on the same database and run dir")

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def rollouts_end_in_time(self) -> None:
        for _ in range(5):  # read again if a rollout began or ended between the reads
            now, records, again = self.active(), self.history(), self.active()
            if now == again:
                break
        if now is not None:
            self.in_time(now)
        running = {r["id"] for r in records if r["state"] == "running"}
        assert running <= ({now["id"]} if now else set()), (running, now)
        by_id = {r["id"]: r for r in records}
        for record in records:
            if record["state"] != "running":
                assert_ended_in_time(record, by_id)
        self.close_recreates(by_id)

    @invariant()
    def status_matches_processes(self) -> None:
        deadline = time.monotonic() + TRUTH_S
        while True:
            _, units = self.plane.api("GET", f"/deployments/{NAME}/status")
            wrong = mismatches(units, self.root / "runs" / NAME)
            if not wrong:
                self.close_victims({u["name"]: u for u in units})
                return
            assert time.monotonic() < deadline, f"status vs processes for {TRUTH_S:g} s: {wrong}"
            time.sleep(0.5)

    @invariant()
    def no_request_lost(self) -> None:
        assert self.ledger is not None
        self.assert_none_lost(self.ledger.sent())

    # -- the steps' common parts -----------------------------------------------------------

    def began(self, rollout: dict, wait: bool) -> None:
        self.say(
            f"  rollout {rollout['id']} {rollout['kind']} by {rollout['strategy']}: "
            f"{len(rollout['steps'])} steps, changes {rollout.get('changes')}"
        )
        if rollout["strategy"] == "recreate":
            self.recreates[rollout["id"]] = time.monotonic() - 0.5
        if wait:
            self.settle()

    def refused(self, status: int, body: dict, strategy: str | None) -> None:
        """A 409 is an allowed answer: the strategy does not fit (one asked for, never the
        default), or a rollout holds the deployment (then it must be visible and abortable)."""
        detail = str(body.get("detail"))
        assert status == 409, (status, body)
        if strategy is not None and any(s in detail for s in REFUSED_STRATEGY):
            return
        assert "holds it" in detail, body
        self.busy(detail)

    def busy(self, detail: str) -> None:
        """Invariant 4: the 409 names the rollout and the verb; it shows, and ends."""
        asked = time.time()
        assert f"pdctl rollout abort {NAME}" in detail, detail
        found = re.search(r"rollout (\d+) \(", detail)
        assert found, detail
        record = self.find(found.group(1))
        assert record["state"] == "running" or (record["ended_at"] or 0) >= asked - 5, record
        status, body = self.api("POST", f"/deployments/{NAME}/rollout/abort?reason=busy")
        self.say(f"  409 names rollout {found.group(1)}; abort: {status}")
        assert status in (202, 409), body
        self.settle()

    def settle(self) -> dict | None:
        """Invariants 1 and 5: the rollout ends by its deadline, then everything runs and the
        status says applied, or which processes drifted and why."""
        while True:
            now = self.rollout()["rollout"]
            if now is None or now["state"] != "running":
                break
            self.in_time(now)
            time.sleep(0.3)
        self.plane.running(NAME, SETTLE_S)
        status = self.rollout()
        assert status["running"], status
        assert status["revision_state"] != "in_progress", status  # nothing left holding it
        if status["applied"]:
            behind = [
                i["name"] for i in status["instances"] if i["revision"] != i["desired_revision"]
            ]
            want = status["desired_revision"]
            assert not behind, f"applied, but {behind} not at revision {want}: {status}"
        else:
            assert status["drifted"], status
            why = {i["name"]: i["why"] for i in status["instances"] if i["drifted"]}
            assert all(why.values()), status
        self.routing_put_back()
        if self.connector == NIXL:
            self.engines_serve_their_roles()
        self.say(
            f"  settled: revision {status['desired_revision']} {status['revision_state']}, "
            f"applied={status['applied']} drifted={status['drifted']}; last rollout "
            + (f"{now['id']} {now['kind']} {now['state']}" if now else "none")
        )
        self.rollouts_end_in_time()
        return now

    def routing_put_back(self) -> None:
        """With no rollout running, the proxy holds no group and every running instance takes
        requests (none drained, none serving whole requests): nothing a rollout set up is
        left behind (within TRUTH_S: the supervisor undrains what it restarted once ready)."""
        deadline = time.monotonic() + TRUTH_S
        while True:
            units = self.plane.status(NAME)
            urls = {u["url"] for u in units.values() if u["state"] == "RUNNING"}
            headers = self.plane.admin_headers(NAME)
            _, raw = http_get(self.proxy + "/admin/groups", timeout=10, headers=headers)
            groups = json.loads(raw)["groups"]
            _, raw = http_get(self.proxy + "/admin/instances", timeout=10, headers=headers)
            listed = json.loads(raw)
            listed = listed.get("instances", []) if isinstance(listed, dict) else listed
            left = [f"group {g['mode']} paused" for g in groups if g["paused"]] + [
                f"{i['url']} {'draining' if i['draining'] else 'whole'}"
                for i in listed
                if i["url"] in urls and (i["draining"] or i["whole"])
            ]
            if not left:
                return
            if time.monotonic() >= deadline:
                last = self.rollout()["rollout"]
                raise AssertionError(
                    f"no rollout runs, yet the proxy has {left}; the last rollout: {last}\n"
                    + self.evidence()
                )
            time.sleep(0.5)

    def engines_serve_their_roles(self) -> None:
        """Every instance's engine serves the role the desired revision gives it, and the
        status shows that role."""
        want = serving_roles(self.desired())
        for name, unit in self.plane.status(NAME).items():
            if unit["role"] == "proxy":
                continue
            _, raw = http_get(unit["url"] + "/v1/pd_role", timeout=10)
            engine = json.loads(raw)["role"]
            assert engine == want.get(name) == unit["role"], (name, engine, want, unit)

    def in_time(self, running: dict) -> None:
        """A running rollout is within its deadline, and so is the step it is at (seen
        running since the first time this test saw it)."""
        over = time.time() - (running["deadline_at"] + SLACK_S)
        assert over <= 0, f"rollout {running['id']} runs {over:.1f} s past its deadline: {running}"
        index = running["step_index"]
        if index >= len(running["step_states"]):
            return
        step = running["step_states"][index]
        key = (running["id"], running["resumed"], index)
        since = self.steps_seen.setdefault(key, time.monotonic())
        over = time.monotonic() - since - (step["deadline_s"] + SLACK_S)
        assert over <= 0, f"rollout {running['id']} is {over:.1f} s past the deadline of {step}"

    def close_recreates(self, by_id: dict[str, dict]) -> None:
        """A recreate's excuse lasts until it (and its rollback) ended and every process runs
        again (one aborted leaves what it restarted coming up)."""
        if not self.recreates:
            return
        units = self.plane.status(NAME)
        if not units or any(u["state"] != "RUNNING" for u in units.values()):
            return
        for rollout_id, began in list(self.recreates.items()):
            record = by_id.get(rollout_id) or self.find(rollout_id)
            back = record.get("rolled_back_by")
            last = self.find(back) if back else record
            if record["state"] == "running" or last["state"] == "running":
                continue
            ended = max(last["ended_at"] - self.wall_offset, time.monotonic())
            self.excuses.append(Excuse(began, ended + 1.0, f"recreate rollout {rollout_id}"))
            del self.recreates[rollout_id]

    def close_victims(self, units: dict[str, dict]) -> None:
        """A killed instance may have been the last of its role in its group (the others
        drained by a rollout): until it runs again, the proxy has none of that role to route
        to, and says so."""
        for name, (pid, at, role) in list(self.down.items()):
            unit = units.get(name)
            if unit is None or (unit["state"] == "RUNNING" and unit["pid"] != pid):
                self.excuses.append(self.without(name, at, role, time.monotonic() + 1.0))
                del self.down[name]

    @staticmethod
    def without(name: str, at: float, role: str, ends: float) -> Excuse:
        # With the other role down too, the proxy names both ("prefill or decode").
        either = "no available prefill or decode instance"
        return Excuse(at, ends, f"{name} down", only=(f"no available {role} instance", either))

    def assert_none_lost(self, sent: list[Sent]) -> None:
        excuses = self.excuses + [
            Excuse(began, float("inf"), f"recreate {i}") for i, began in self.recreates.items()
        ]
        excuses += [
            self.without(n, at, role, float("inf")) for n, (_, at, role) in self.down.items()
        ]
        lost = unexplained(sent, excuses)
        if lost:
            why = "lost: " + "; ".join(
                f"#{s.number} at {s.started - self.t0:.2f}-{s.ended - self.t0:.2f} s: {s.error}"
                for s in lost[:10]
            )
            self.say(why)
            raise AssertionError(f"{why}\n{self.evidence()}")

    # -- the API ---------------------------------------------------------------------------

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        return self.plane.api(method, path, body)

    def desired(self) -> dict:
        status, current = self.api("GET", f"/deployments/{NAME}")
        assert status == 200, current
        return current["spec"]

    def rollout(self) -> dict:
        status, body = self.api("GET", f"/deployments/{NAME}/rollout")
        assert status == 200, body
        return body

    def history(self) -> list[dict]:
        status, body = self.api("GET", f"/deployments/{NAME}/rollouts?limit=100")
        assert status == 200, body
        return body

    def find(self, rollout_id: str) -> dict:
        status, body = self.api("GET", f"/deployments/{NAME}/rollouts/{rollout_id}")
        assert status == 200, body
        return body

    def active(self) -> dict | None:
        """The rollout running now, if one does."""
        now = self.rollout()["rollout"]
        return now if now is not None and now["state"] == "running" else None

    def last_rollout_id(self) -> str | None:
        last = self.rollout()["rollout"]
        return last["id"] if last is not None else None

    def kill(self, pid: int) -> float | None:
        """SIGKILL `pid` (one of ours: a pdctl process); when, on the monotonic clock (None:
        it is gone already)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None
        assert b"pdctl.py" in cmdline, cmdline
        at = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return at

    def serving_again(self, since: float) -> float:
        """When a completion through the proxy is served again after `since`."""
        deadline = since + PROXY_BACK_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                status, _ = http_post(self.proxy + "/v1/completions", PROMPT_ONE, timeout=10)
                if status == 200:
                    return time.monotonic()
            time.sleep(0.2)
        raise AssertionError(f"the proxy serves nothing {PROXY_BACK_S:g} s after its SIGKILL")

    def evidence(self, events: int = 40, lines: int = 30) -> str:
        """What a failure report carries beyond the journal (CI keeps no run dir): the
        control plane's last events, wall-clock times turned into the journal's, and the
        tail of the proxy's log."""
        out = ["last events (journal time, actor, kind, message):"]
        with (
            contextlib.suppress(sqlite3.Error),
            contextlib.closing(sqlite3.connect(self.root / "pdctl.db")) as db,
        ):
            rows = db.execute(
                "SELECT ts, actor, kind, message FROM events ORDER BY id DESC LIMIT ?", (events,)
            ).fetchall()
            for ts, actor, kind, message in reversed(rows):
                wall = datetime.fromisoformat(str(ts)).replace(tzinfo=UTC).timestamp()
                at = wall - self.wall_offset - self.t0
                out.append(f"  {at:7.2f} {actor} {kind}: {message}")
        log = self.root / "runs" / NAME / "proxy" / "output.log"
        with contextlib.suppress(OSError):
            out.append("the proxy's log, last lines:")
            out += ["  " + line[:300] for line in log.read_text().splitlines()[-lines:]]
        out += self.failed_in_proxy()
        return "\n".join(out)

    def failed_in_proxy(self) -> list[str]:
        """The proxy's own record of the requests it failed, each attempt's pair and error:
        which instances a lost request tried, and in what order."""
        token_file = self.root / "runs" / NAME / "proxy-admin-token"
        with contextlib.suppress(OSError, ValueError):
            auth = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
            status, raw = http_get(f"{self.proxy}/admin/requests?limit=1000", 5.0, auth)
            if status != 200:
                return [f"the proxy's request log: HTTP {status}"]
            failed = [r for r in json.loads(raw)["requests"] if r.get("outcome") != "ok"]
            return ["the proxy's failed requests:"] + [
                "  " + json.dumps(r)[:1500] for r in failed[-10:]
            ]
        return ["the proxy's request log: not readable"]

    def say(self, line: str) -> None:
        text = f"{time.monotonic() - self.t0:7.2f} {line}"
        note(text)
        with self.journal.open("a") as out:
            out.write(text + "\n")

    # -- the end ---------------------------------------------------------------------------

    def teardown(self) -> None:
        """The last checks (the rollout ends, every request sent answered), then nothing of
        the test is left running."""
        try:
            if self.ledger is not None and self.plane.proc is not None:
                self.settle()
                sent = self.ledger.stop()
                self.rollouts_end_in_time()
                self.say(
                    f"load: {len(sent)} sent, {sum(s.ok for s in sent)} ok, "
                    f"{sum(not s.ok for s in sent)} failed within an excuse"
                )
                self.assert_none_lost(sent)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the load, the deployment and `pdctl serve`; then kill whatever a shim still
        runs under the run dir (the harness reaps what the state files name; an orphan has
        none)."""
        if self.ledger is not None:
            self.ledger.stop()
        if self.plane.proc is not None and self.plane.proc.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.plane.api("POST", f"/deployments/{NAME}/rollout/abort")
                self.plane.api("POST", f"/deployments/{NAME}/stop")
        self.plane.close()
        deadline = time.monotonic() + 3.0  # what the harness SIGKILLed is on its way out
        while shims(self.root / "runs" / NAME) and time.monotonic() < deadline:
            time.sleep(0.1)
        for shim, name in shims(self.root / "runs" / NAME):
            for pid in (*children(shim), shim):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.say(f"left behind: {name} (shim pid {shim}), killed")


PROMPT_ONE = {"model": "tiny", "prompt": "one", "max_tokens": 2, "ignore_eos": True}


def assert_ended_in_time(record: dict, by_id: dict[str, dict]) -> None:
    """An ended rollout ended by its deadline; one that rolled back, by its rollback's (its
    own record ends when the rollback does)."""
    rollback = by_id.get(record.get("rolled_back_by") or "")
    deadline = (rollback or record)["deadline_at"]
    ended = record["ended_at"]
    assert ended is not None, f"rollout {record['id']} is {record['state']} with no end: {record}"
    assert ended <= deadline + SLACK_S, (
        f"rollout {record['id']} ended {ended - deadline:.1f} s past its deadline: {record}"
    )


def run(root: Callable[[], Path], seed_: int, examples: int, steps: int, shrink: bool) -> None:
    """Run the machine: `examples` sequences of `steps` steps each, from `seed_`."""

    made: list[Path] = []

    def machine() -> Lifecycle:
        made.append(root())
        return Lifecycle(made[-1])

    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    try:
        _run(machine, seed_, examples, steps, phases)
    except BaseException:
        # A replay on real processes may not fail as the run did (Hypothesis then reports it
        # flaky, without the run's notes): each sequence's journal, from its own file.
        for where in made[-3:]:
            with contextlib.suppress(OSError):
                lines = (where / "journal.txt").read_text().splitlines()[-60:]
                print(f"\njournal of {where.name} (last 60 lines):", *lines, sep="\n")
        raise


def _run(machine: Callable[[], Lifecycle], seed_: int, examples: int, steps: int, phases) -> None:
    run_state_machine_as_test(
        seed(seed_)(machine),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            phases=phases,
            print_blob=True,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )
