"""What the read verbs print for the API's answers: deployments, one deployment with its
instances, revisions, events, advice and a switch's progress. Pure: JSON in, text out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from terminal.serving_roles import by_serving_role, moved_notes
from terminal.tables import age, cell, clock, node_address, since, table

Json = dict[str, Any]
UP = "RUNNING"
DOWN = frozenset({"STOPPED", "EXITED", "FATAL"})


def ready(units: list[Json]) -> str:
    """`2/3`: instances RUNNING of all (the proxy counted too); `-` when none is supervised."""
    if not units:
        return "-"
    return f"{sum(u['state'] == UP for u in units)}/{len(units)}"


def modes(spec: Json) -> str:
    found = sorted({g.get("mode") or "-" for g in spec["groups"] if g["role"] != "colocated"})
    return ",".join(found) if found else "colocated"


def deployments(listed: list[Json], statuses: dict[str, list[Json]], now: datetime) -> str:
    rows = [
        (
            d["name"],
            d["revision"],
            d["state"],
            d["spec"]["topology"],
            modes(d["spec"]),
            d["spec"]["model"],
            ready(statuses.get(d["name"], [])),
            since(d["updated_at"], now),
        )
        for d in listed
    ]
    headers = ("name", "revision", "state", "topology", "mode", "model", "ready", "age")
    return table(headers, rows)


def instances(units: list[Json]) -> str:
    rows = [
        (
            u["name"],
            u["role"],
            u.get("mode"),
            u["state"],
            _health(u),
            node_address(u),
            u.get("pid"),
            u.get("restarts"),
            age(u.get("uptime")),
        )
        for u in units
    ]
    headers = ("instance", "role", "mode", "state", "health", "node", "pid", "restarts", "uptime")
    return table(headers, rows)


def _health(unit: Json) -> str:
    if unit.get("health") is None:
        return "-"
    return "healthy" if unit["health"] else "unhealthy"


def deployment(d: Json, units: list[Json], autopilot: Json | None = None) -> str:
    """`pdctl show`: the spec in a few lines, the revision and its state, then the instances
    (and the autopilot's mode and last move when the spec has one)."""
    spec = d["spec"]
    groups = ", ".join(
        f"{g['name']} ({g['role']}, {g.get('count', 1)}x tp{g.get('tp', 1)}"
        + (f", {g['mode']}" if g.get("mode") else "")
        + ")"
        for g in spec["groups"]
    )
    slo = spec.get("slo") or {}
    said = [
        ("Name", d["name"]),
        (
            "Revision",
            f"{d['revision']} ({d['state']}) by {d['actor']}"
            + (f": {d['reason']}" if d.get("reason") else ""),
        ),
        (
            "Engine",
            f"{spec['engine']} {spec['model']}"
            + (f" on {spec['hardware']}" if spec.get("hardware") else ""),
        ),
        (
            "Topology",
            spec["topology"] + (f" via {spec['connector']}" if spec.get("connector") else ""),
        ),
        ("Groups", groups),
        (
            "SLO",
            f"TTFT {cell(slo.get('ttft_ms'))} ms, ITL {cell(slo.get('itl_ms'))} ms "
            f"({slo.get('itl_stat', 'p99')})",
        ),
        ("Proxy", f"port {d['ports']['proxy']}, registry {d['ports']['registry']}"),
        ("Ready", ready(units)),
    ]
    if autopilot is not None:
        said.append(("Autopilot", autopilot_line(autopilot)))
    width = max(len(k) for k, _ in said) + 1
    head = "\n".join(f"{k + ':':<{width}} {v}" for k, v in said)
    body = (
        instances(by_serving_role(units, spec))
        if units
        else "No instances: not started (pdctl start " + d["name"] + ")"
    )
    notes = "".join(f"\n{line}" for line in moved_notes(spec))  # under the role it serves
    return f"{head}\n\n{body}{notes}"


def revisions(listed: list[Json], current: int | None) -> str:
    rows = [
        (
            f"{r['number']}{' *' if r['number'] == current else ''}",
            clock(r["created_at"]),
            r["actor"],
            r["state"],
            r.get("reason"),
        )
        for r in listed
    ]
    return table(("revision", "created", "actor", "state", "reason"), rows)


def events(listed: list[Json]) -> str:
    """Oldest first, as a log reads."""
    rows = [(clock(e["ts"]), e["actor"], e["kind"], e["message"]) for e in listed]
    return table(("time", "actor", "kind", "message"), rows)


def event_line(e: Json) -> str:
    """One followed event, on the columns `events` would give it."""
    return f"{clock(e['ts'])}   {e['actor']}   {e['kind']}   {cell(e['message'])}"


def advice(answer: Json) -> str:
    live = "live" if answer.get("live") else "not live: no frame yet (not running or not scraped)"
    out = [f"{answer['deployment']}: advice over the {answer['window']} window ({live})"]
    waiting = answer.get("not_enough_evidence")
    if waiting:  # the window is no evidence: the traffic rules decide nothing (their numbers)
        out.append(f"  {cell(waiting)}: no rule that reads the traffic decides")
    for v in answer["verdicts"]:
        if v.get("not_enough_evidence"):
            out.append(f"  [  -] {v['rule']}: not enough evidence")
        else:
            mark = {True: "YES", False: "no", None: "?"}[v["triggered"]]
            out.append(f"  [{mark:>3}] {v['rule']}: {cell(v['advice'])}")
        numbers = ", ".join(f"{k}={cell(val)}" for k, val in (v.get("evidence") or {}).items())
        if numbers:
            out.append(f"        {numbers}")
    return "\n".join(out)


def switch_step(record: Json) -> str:
    """Where a running switch is: `step 2/5: restart decode`."""
    steps = record.get("steps") or []
    current = record.get("current")
    if current in steps:
        return f"step {steps.index(current) + 1}/{len(steps)}: {current}"
    return current or "starting"


def switch_outcome(record: Json) -> str:
    """The one line a finished switch ends with."""
    took = (record.get("ended_at") or record["started_at"]) - record["started_at"]
    line = (
        f"{record['deployment']}: switch {record['id']} to {record['target']} by "
        f"{record['strategy']} {record['state']} in {took:.1f} s "
        f"(revision {record['revision']} {record['revision_state'].replace('_', ' ')})"
    )
    if record.get("held_s") is not None:
        line += f"; requests held {record['held_s']:.2f} s"
    if record.get("degraded_s") is not None:
        line += f"; whole requests for {record['degraded_s']:.2f} s"
    if record.get("rejected"):
        line += f"; {record['rejected']} rejected with 503"
    if record.get("error"):
        line += f": failed at {record.get('failed_step')!r}: {record['error']}"
    return line


def autopilot_line(a: Json) -> str:
    """ "on, last move decode-1 decode -> prefill (revision 3): TTFT-bound ..." in one line."""
    move = a.get("last_move")
    if move is None:
        last = a.get("last_decision") or {}
        return f"{a['mode']}, no move yet" + (f" ({last['why']})" if last.get("why") else "")
    verb = "would move" if move.get("dry_run") else "last move"
    rev = f" (revision {move['revision']})" if move.get("revision") else ""
    return (
        f"{a['mode']}, {verb} {move['instance']} {move['from']} -> {move['to']}{rev}: {move['why']}"
    )
