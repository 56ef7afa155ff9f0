"""What the run dir remembers of a deployment across supervisors: its spec, ports and desired
state (RUN_DIR/NAME/deployment.json), its proxy's admin token (RUN_DIR/NAME/proxy-admin-token)
and each process's restart count, written atomically, 0600 (the spec's env holds secrets)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from controller.backends import private_files
from controller.launch.ports import AllocatedPorts
from controller.spec.deployment import DeploymentSpec, InstancePorts

DEPLOYMENT_FILE = "deployment.json"
RESTARTS_FILE = "restarts"
PLACEMENT_FILE = "placement.json"
ADMIN_TOKEN_FILE = "proxy-admin-token"


class Told(NamedTuple):
    """A process told its launch in place: which process (pid, start time, the command line it
    started with), and the command line it runs since (None: its revision's; saved before
    that was kept)."""

    pid: int
    start_time: int | None
    argv: tuple[str, ...]
    runs: tuple[str, ...] | None = None

    def names(self, pid: int | None, start_time: int | None, argv: tuple[str, ...]) -> bool:
        """It is the process with this pid, start time and command line."""
        return (self.pid, self.start_time, self.argv) == (pid, start_time, argv)


def save_deployment(
    folder: Path,
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    revision: int | None = None,
    units: dict[str, int] | None = None,
    older: dict[int, tuple[DeploymentSpec, AllocatedPorts]] | None = None,
    in_place: dict[str, Told] | None = None,
) -> None:
    """Record `spec` on `ports`, wanted running: revision `revision`; mid-rollout, `units`
    says which revision each process runs and `older` holds the revisions besides `spec`;
    `in_place`: the processes told their launch without a restart (which process, and the
    command line it runs since)."""
    _write_json(
        folder / DEPLOYMENT_FILE,
        {
            "spec": spec.model_dump(mode="json"),
            "running": True,
            "ports": _ports_json(ports),
            "revision": revision,
            "units": units or {},
            "older": {
                str(number): {"spec": s.model_dump(mode="json"), "ports": _ports_json(p)}
                for number, (s, p) in (older or {}).items()
            },
            "in_place": {
                name: {
                    "pid": told.pid,
                    "start_time": told.start_time,
                    "argv": list(told.argv),
                    "runs": None if told.runs is None else list(told.runs),
                }
                for name, told in (in_place or {}).items()
            },
        },
    )


def load_in_place(path: Path) -> dict[str, Told]:
    """The processes told their launch in place, as saved; nothing if it cannot be read (the
    process is then taken to run its command line, and the next rollout restarts it)."""
    try:
        saved = json.loads(path.read_text()).get("in_place") or {}
        return {
            str(name): Told(
                int(told["pid"]),
                None if told.get("start_time") is None else int(told["start_time"]),
                tuple(str(a) for a in told["argv"]),
                None if told.get("runs") is None else tuple(str(a) for a in told["runs"]),
            )
            for name, told in saved.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _ports_json(ports: AllocatedPorts) -> dict[str, Any]:
    return {
        "proxy": ports.proxy,
        "registry": ports.registry,
        "instances": {k: v.model_dump() for k, v in ports.instances.items()},
    }


def _ports(saved: dict[str, Any]) -> AllocatedPorts:
    return AllocatedPorts(
        saved["proxy"],
        saved["registry"],
        {k: InstancePorts(**v) for k, v in saved["instances"].items()},
    )


def save_stopped(folder: Path) -> None:
    """Record that the deployment is wanted stopped (a later supervisor leaves it down)."""
    path = folder / DEPLOYMENT_FILE
    _write_json(path, {**json.loads(path.read_text()), "running": False})


def saved_deployments(run_dir: Path) -> Iterator[Path]:
    return iter(sorted(run_dir.glob(f"*/{DEPLOYMENT_FILE}")))


def load_deployment(path: Path) -> tuple[DeploymentSpec, AllocatedPorts, bool]:
    """(spec, ports, wanted running); ValueError or KeyError for a file that is not one."""
    saved = json.loads(path.read_text())
    spec = DeploymentSpec.model_validate(saved["spec"])
    return spec, _ports(saved["ports"]), bool(saved.get("running", True))


def load_revisions(
    path: Path,
) -> tuple[int | None, dict[str, int], dict[int, tuple[DeploymentSpec, AllocatedPorts]]]:
    """(desired revision, each unit's revision, the older revisions' spec and ports) as saved;
    nothing for a file written before revisions were kept, or one that cannot be read."""
    try:
        saved = json.loads(path.read_text())
        older = {
            int(number): (DeploymentSpec.model_validate(o["spec"]), _ports(o["ports"]))
            for number, o in (saved.get("older") or {}).items()
        }
        units = {str(k): int(v) for k, v in (saved.get("units") or {}).items()}
        revision = saved.get("revision")
        return (int(revision) if revision is not None else None), units, older
    except (ValueError, KeyError, TypeError):
        return None, {}, {}


def write_restarts(folder: Path, name: str, restarts: int) -> None:
    folder = private_files.private_dir(folder / name)
    private_files.replace_text(folder / RESTARTS_FILE, str(restarts))


def read_restarts(folder: Path, name: str) -> int:
    try:
        return int((folder / name / RESTARTS_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def write_admin_token(folder: Path, token: str) -> None:
    """The token the deployment's proxy was started with, for a later supervisor to use."""
    private_files.replace_text(folder / ADMIN_TOKEN_FILE, token)


def read_admin_token(folder: Path) -> str | None:
    try:
        return (folder / ADMIN_TOKEN_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def write_placement(folder: Path, nodes: dict[str, dict[str, str]]) -> None:
    """Each process's node ({"id", "address"}) on a cluster: a later supervisor renders the
    same addresses, so it adopts what runs instead of restarting it."""
    _write_json(folder / PLACEMENT_FILE, nodes)


def read_placement(folder: Path) -> dict[str, dict[str, str]]:
    try:
        saved = json.loads((folder / PLACEMENT_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {
        name: {"id": str(node["id"]), "address": str(node["address"])}
        for name, node in saved.items()
        if isinstance(node, dict) and {"id", "address"} <= node.keys()
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    private_files.replace_text(path, json.dumps(data, indent=1))
