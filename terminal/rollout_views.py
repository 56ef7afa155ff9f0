"""What the rollout verbs print for the API's rollout records (controller/rollout/record.py)
and each process's truth (GET .../rollout): a step as it moves, what a rollout changes, the
line it ends with, the truth table and the history. Pure: JSON in, text out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from terminal.tables import cell, table

Json = dict[str, Any]
Seen = dict[str, tuple[str, str]]  # "rollout id/step index" -> (step, state) printed
ACTIONS = ("restart", "start", "stop")  # what a rollout does to a process (keep: nothing)
STRATEGIES = ("roll", "hold", "recreate")  # what an operator may ask of a rollout


def ongoing(rec: Json, shown: Json | None) -> bool:
    """True while `rec`, or the rollback it began, still runs. A failed or aborted rollout
    gets its `ended_at` only once its rollback has ended; `shown`, the deployment's rollout
    (the running one, else the last), tells that wait from a record a stopped control plane
    left without one."""
    if rec["state"] == "running":
        return True
    if rec.get("ended_at") is not None or shown is None:
        return False
    if shown["id"] == rec["id"]:
        return True
    return shown.get("rollback_of") == rec["id"] and shown["state"] == "running"


def title(rec: Json) -> str:
    """`rollout 4 (apply by roll)`."""
    return f"rollout {rec['id']} ({rec['kind']} by {rec['strategy']})"


def where(rec: Json) -> str:
    """`step 3/10: apply prefill-0, decode-0`, or what it does between steps."""
    steps = rec.get("steps") or []
    current = rec.get("current")
    if rec["state"] == "running" and steps and current in steps:
        return f"step {min(rec['step_index'] + 1, len(steps))}/{len(steps)}: {current}"
    return current or rec["state"]


def changes(rec: Json) -> str:
    """`restart prefill-0, decode-0; start decode-1`, or `nothing to change`."""
    found = rec.get("changes") or {}
    said = [f"{a} {', '.join(found[a])}" for a in ACTIONS if found.get(a)]
    return "; ".join(said) or "nothing to change"


def begun(rec: Json) -> str:
    """The line a verb prints for the rollout it began (or joined)."""
    return f"{rec['deployment']}: {title(rec)} toward revision {rec['revision']}: {changes(rec)}"


def rolling_out(rec: Json) -> str:
    """What `pdctl apply` says of the rollout a new revision began."""
    return (
        f"rolling out revision {rec['revision']} by {rec['strategy']}: {changes(rec)}; "
        f"follow with `pdctl rollout status {rec['deployment']}`"
    )


def would_roll_out(preview: Json, strategy: str | None = None) -> list[str]:
    """What `pdctl apply --dry-run` says a rollout would do (the dry run's `rollout`): what
    changes and why, and the strategies this layout cannot use, with why."""
    lines = [f"would roll out by {strategy or preview.get('default')}: {changes(preview)}"]
    lines += [f"  {name}: {why}" for name, why in (preview.get("why") or {}).items()]
    refused = (preview.get("strategies") or {}).items()
    lines += [f"  not {s}: {why}" for s, why in refused if why and s in STRATEGIES]
    return lines


def stored_pending(name: str, revision: int, held: bool = True) -> str:
    """A revision stored and not rolled out: held back by --no-rollout on a running
    deployment, or stored for a stopped one (pending until a start has it all ready)."""
    if held:
        return f"stored revision {revision} as pending: `pdctl restart {name}` rolls it out"
    return f"stored revision {revision} as pending: `pdctl start {name}` runs it"


def step_line(rec: Json, index: int) -> str:
    """`rollout 4 step 3/10 apply prefill-0: done in 0.4 s`."""
    states = rec["step_states"]
    step = states[index]
    head = f"rollout {rec['id']} step {index + 1}/{len(states)} {step['step']}"
    state = step["state"]
    if state == "running":
        return f"{head}: running (deadline {step['deadline_s']:g} s)"
    took = f" in {step['seconds']:.1f} s" if step.get("seconds") is not None else ""
    if state == "failed":
        return f"{head}: failed{took}: {step.get('error') or 'no reason given'}"
    return f"{head}: {state}{took}"


def progress(seen: Seen, rec: Json | None) -> list[str]:
    """The step lines of `rec` not printed yet; `seen` is updated with them."""
    if rec is None:
        return []
    lines = []
    for index, step in enumerate(rec.get("step_states") or []):
        key, now = f"{rec['id']}/{index}", (step["step"], step["state"])
        if step["state"] == "pending" or seen.get(key) == now:
            continue
        seen[key] = now
        lines.append(step_line(rec, index))
    return lines


def took(rec: Json) -> float | None:
    if rec.get("ended_at") is None:
        return None
    return max(0.0, rec["ended_at"] - rec["started_at"])


def outcome(rec: Json, rollback: Json | None = None) -> str:
    """The one line a rollout ends with: how, how long, the revision it settled, why it
    failed and how its rollback went."""
    seconds = took(rec)
    line = f"{rec['deployment']}: {title(rec)} {rec['state']}"
    if seconds is not None:
        line += f" in {seconds:.1f} s"
    settled = (rec.get("revision_state") or "").replace("_", " ")
    line += f" (revision {rec['revision']}{' ' + settled if settled else ''})"
    if rec.get("held_s") is not None:
        line += f"; requests held {rec['held_s']:.2f} s"
    if rec.get("degraded_s") is not None:
        line += f"; whole requests for {rec['degraded_s']:.2f} s"
    if rec.get("rejected"):
        line += f"; {rec['rejected']} rejected with 503"
    if rec.get("error"):
        line += f": {rec['error']}"
    if rec.get("undo_left"):
        line += "; not undone: " + "; ".join(rec["undo_left"])
    if rollback is not None:
        line += f"; rolled back by rollout {rollback['id']}: {rollback['state']}"
        if rollback.get("error"):
            line += f" ({rollback['error']})"
    return line


def truth(instances: list[Json]) -> str:
    """Each process: the revision it runs, the one desired, whether it drifted and why."""
    rows = [
        (
            i["name"],
            i["role"],
            i["state"],
            i.get("revision"),
            i.get("desired_revision"),
            i["drifted"],
            i.get("why"),
        )
        for i in instances
    ]
    return table(("name", "role", "state", "revision", "desired", "drifted", "why"), rows)


def verdict(body: Json) -> str:
    """What GET .../rollout says of the deployment, in one line."""
    name, want = body["deployment"], body["desired_revision"]
    if not body["running"]:
        return f"{name}: not running (revision {want} desired; pdctl start {name})"
    if body["applied"]:
        return f"{name}: revision {want} applied: every process runs it, ready"
    drifted = body.get("drifted") or []
    state = body["revision_state"].replace("_", " ")
    said = f"{len(drifted)} drifted: {', '.join(drifted)}" if drifted else "not every process ready"
    return f"{name}: revision {want} {state}, not applied: {said}"


def status(body: Json) -> str:
    """`pdctl rollout status` with no rollout running: the verdict, the last rollout, the
    truth table."""
    rec = body.get("rollout")
    last = f"last: {outcome(rec)}" if rec is not None else "no rollout yet"
    if rec is not None and rec["state"] == "running":
        last = f"running: {title(rec)}, {where(rec)}"
    return "\n".join((verdict(body), last, "", truth(body.get("instances") or [])))


def history(records: list[Json]) -> str:
    """Newest first, as the API gives them."""
    rows = [
        (
            r["id"],
            _clock(r.get("started_at")),
            r["kind"],
            r["strategy"],
            r["revision"],
            r["state"],
            f"{took(r):.1f}s" if took(r) is not None else None,
            r.get("error"),
        )
        for r in records
    ]
    headers = ("id", "started", "kind", "strategy", "revision", "state", "took", "error")
    return table(headers, rows)


def _clock(epoch: float | None) -> str:
    if not epoch:
        return cell(None)
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")
