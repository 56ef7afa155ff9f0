"""The autopilot's shell (services/autopilot_loop.py) over fakes: it samples the observer's 10 s
frame once per new frame, moves through the controller in a live run and only records in a
dry run, writes a held decision once per guard rail, and says what it did in `status`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from controller.spec.deployment import DeploymentSpec
from services.autopilot_loop import AutopilotLoop


def spec(**autopilot) -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
            "name": "auto",
            "engine": "sim",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "groups": [
                {"name": "prefill", "role": "prefill", "count": 2},
                {"name": "decode", "role": "decode", "count": 2},
            ],
            "slo": {"ttft_ms": 1000, "itl_ms": 50},
            "role_switch": {},
            "autopilot": {"window_s": 5, "cooldown_s": 600, **autopilot},
        }
    )


def frame(ts: float) -> dict:
    """TTFT-bound: first tokens late, nothing waits on a decode, ITL fine."""
    rows = [
        {"name": n, "role": n.split("-")[0], "running": 1, "waiting": 0, "kv_cache_usage": 0.1}
        for n in ("prefill-0", "prefill-1", "decode-0", "decode-1")
    ]
    return {
        "ts": ts,
        "slo": {"ttft_ms": 1000, "itl_ms": 50},
        "slo_attainment": 0.2,
        "ttft": {"count": 30, "p90": 3.0},
        "itl": {"count": 100, "p90": 0.01},
        "instances": rows,
        # 30 client requests in the 10 s frame, no change in it (observe/sections/evidence.py)
        "evidence": {"real_requests": 30, "disturbed": False, "enough": True, "why": None},
    }


class Fakes:
    def __init__(self, dep_spec: DeploymentSpec) -> None:
        self.events: list[tuple] = []
        self.moves: list[tuple] = []
        self.switch_running = False
        self.stored = dep_spec  # the current revision's spec
        dep = SimpleNamespace(spec=dep_spec, running=True)
        self.observer = SimpleNamespace(latest={})
        self.controller = SimpleNamespace(
            supervisor=SimpleNamespace(deployments={"auto": dep}),
            steering=SimpleNamespace(role_moves=SimpleNamespace(busy=lambda name: False)),
            rollouts=SimpleNamespace(
                active=lambda name: (
                    SimpleNamespace(describe=lambda: "rollout 7 (switch by hold)")
                    if self.switch_running
                    else None
                )
            ),
            status=lambda name: [{"name": "proxy", "state": "RUNNING"}],
            move_role=self.move_role,
        )
        self.store = SimpleNamespace(
            get=lambda name: SimpleNamespace(spec=self.stored, state="applied", revision=1),
            record=lambda *args: self.events.append(args),
        )

    async def move_role(self, name, spec, instance, role, **how):
        self.moves.append((instance, role, how["actor"]))
        return {"revision": 2, "instance": instance, "from": "decode", "to": role}

    async def run(self, loop: AutopilotLoop, seconds: int, start: float = 100.0) -> None:
        for i in range(seconds):
            self.observer.latest = {"auto": {"10s": frame(start + i)}}
            await loop.tick()
            await loop.tick()  # the same frame again: no new sample
            for pilot in loop.pilots.values():
                if pilot.moving is not None:
                    await pilot.moving


def kinds(fakes: Fakes) -> list[str]:
    return [e[1] for e in fakes.events]


def test_a_live_run_moves_once_then_the_cooldown_holds_once():
    fakes = Fakes(spec())
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 20))
    assert fakes.moves == [("decode-1", "prefill", "autopilot")]
    assert kinds(fakes) == ["autopilot.move", "autopilot.held"]
    move = fakes.events[0]
    assert move[4]["revision"] == 2 and move[4]["numbers"]["ttft_p90_s_min"] == 3.0
    assert "cooldown" in fakes.events[1][2]
    shown = loop.status("auto", spec())
    assert shown["mode"] == "on" and shown["last_move"]["revision"] == 2
    assert shown["moves_last_hour"] == 1


def test_a_dry_run_moves_nothing_and_records_what_it_would_do():
    fakes = Fakes(spec(dry_run=True))
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 8))
    assert fakes.moves == []
    assert kinds(fakes) == ["autopilot.dry_run", "autopilot.held"]  # its cooldown too
    assert "would move decode-1 decode -> prefill" in fakes.events[0][2]
    assert loop.status("auto", spec(dry_run=True))["mode"] == "dry-run"


def test_a_switch_under_way_holds_and_is_written_once():
    fakes = Fakes(spec())
    fakes.switch_running = True
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 12))
    assert fakes.moves == [] and kinds(fakes) == ["autopilot.held"]
    assert "rollout 7 (switch by hold) is under way" in fakes.events[0][2]


def test_off_when_the_spec_says_so():
    fakes = Fakes(spec(enabled=False))
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 8))
    assert fakes.events == [] and loop.pilots == {}
    assert loop.status("auto", spec(enabled=False))["mode"] == "off"


def test_a_stopped_deployment_is_not_read_nor_steered():
    """Every second per deployment the loop read and parsed its stored spec, stopped ones too:
    on a loaded host that was the control plane's CPU (and GIL) spent on nothing."""
    fakes = Fakes(spec())
    reads: list[str] = []
    get = fakes.store.get
    fakes.store.get = lambda name: (reads.append(name), get(name))[1]
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 2))
    assert reads and loop.pilots
    fakes.controller.supervisor.deployments["auto"].running = False
    reads.clear()
    asyncio.run(fakes.run(loop, 3))
    assert reads == [] and loop.pilots == {}


def test_the_current_revision_turns_it_to_dry_run_without_a_restart():
    fakes = Fakes(spec())
    fakes.stored = spec(dry_run=True)  # a new revision; the running spec is unchanged
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 5))
    assert fakes.moves == [] and kinds(fakes) == ["autopilot.dry_run"]
    fakes.stored = spec(enabled=False)
    asyncio.run(fakes.run(loop, 3, start=200))
    assert loop.pilots == {}


def test_the_live_frames_carry_its_mode_and_last_move_while_it_steers():
    fakes = Fakes(spec())
    fakes.observer.sections = {}
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    section = fakes.observer.sections["autopilot"]
    assert section("auto") is None  # nothing decided yet: the frame has no autopilot
    asyncio.run(fakes.run(loop, 20))
    shown = section("auto")
    assert shown["mode"] == "on" and shown["last_move"]["instance"] == "decode-1"
    assert shown["line"].startswith("autopilot: on, last move decode-1 decode -> prefill, rev")
    assert "settings" not in shown and shown["moves_last_hour"] == 1
    assert section("other") is None
    fakes.stored = spec(enabled=False)  # turned off in a new revision: the frames drop it
    asyncio.run(fakes.run(loop, 2, start=300))
    assert section("auto") is None


def test_a_dry_runs_frame_line_says_what_it_would_do():
    fakes = Fakes(spec(dry_run=True))
    fakes.observer.sections = {}
    loop = AutopilotLoop(fakes.controller, fakes.observer, fakes.store)
    asyncio.run(fakes.run(loop, 8))
    line = fakes.observer.sections["autopilot"]("auto")["line"]
    assert line.startswith("autopilot: dry-run, would move decode-1 decode -> prefill: ")
