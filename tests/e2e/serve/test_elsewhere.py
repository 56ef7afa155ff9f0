"""`pdctl serve` started from a directory that is not the repo's, with a relative runtime dir and
the control plane's tokens in its environment: one run dir for the supervisor and the shims,
children without those tokens, proxies whose /admin takes a token of their own, private run
files, adoption of the same processes after a kill -9 of `pdctl serve`, and a stop that
leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
import urllib.request
from pathlib import Path

import pytest

from controller.backends import procfs
from harness.control_plane import ControlPlane
from harness.processes import ROOT, Process, http_post, reap_instances

pytestmark = pytest.mark.e2e

OPERATOR = "op-Zq81-secret"
VIEWER = "view-Xy27-secret"
MARK = "far-away-7731"


class ElsewherePlane(ControlPlane):
    """A control plane run from `cwd`, its runtime dir given relative to it, tokens on."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.cwd = tmp / "elsewhere"
        self.cwd.mkdir()
        self.runs = self.cwd / "runs"
        self.env |= {
            "PDCTL_RUNTIME_DIR": "runs",
            "PDCTL_OPERATOR_TOKENS": f"ops:{OPERATOR}",
            "PDCTL_VIEWER_TOKENS": f"viewer:{VIEWER}",
        }

    def start(self, timeout: float = 60) -> ElsewherePlane:
        self.proc = Process(
            ["serve", "--port", str(self.port), "--db", str(self.db)],
            self.port,
            env=self.env,
            log_path=self.tmp / f"serve-{time.monotonic_ns()}.log",
            cwd=self.cwd,
        )
        self.proc.wait_healthy(timeout)
        return self

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        reap_instances(self.runs)

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        url = self.proc.url + "/api" + path
        if method == "POST":
            return http_post(url, body or {}, timeout=60, headers=headers)
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")


def spec(name: str) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "env": {"VLLM_LOGGING_PREFIX": MARK},
        "groups": [
            {"name": "prefill", "role": "prefill", "mode": "read"},
            {"name": "decode", "role": "decode", "mode": "read"},
        ],
    }


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


def admin(proxy_port: int, path: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http_post(f"http://127.0.0.1:{proxy_port}/admin{path}", {}, headers=headers)[0]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def shim_pids(runs: Path) -> list[tuple[int, int | None]]:
    """(pid, start time) of every child and shim the state files name."""
    found = []
    for state_file in runs.glob("*/*/state.json"):
        state = json.loads(state_file.read_text())
        for key in ("child", "shim"):
            if state.get(f"{key}_pid"):
                found.append((state[f"{key}_pid"], state.get(f"{key}_start_time")))
    return found


@pytest.fixture
def plane(tmp_path):
    plane = ElsewherePlane(tmp_path).start()
    try:
        yield plane
    finally:
        plane.close()


def test_serve_from_another_directory_adopts_after_kill_and_leaves_nothing(plane):
    name = "far"
    status, created = plane.api("POST", "/deployments", spec(name))
    assert status == 201, created
    ports = created["ports"]
    assert plane.api("POST", f"/deployments/{name}/start")[0] == 202
    units = plane.running(name)

    # One run dir: the supervisor's and the shims', under the directory serve started in.
    folder = plane.runs / name
    assert {p.parent.name for p in folder.glob("*/state.json")} == set(units)
    assert not (ROOT / "runs" / name).exists()

    # Children: engines get the deployment's entries; nobody the control plane's tokens.
    for unit in units.values():
        env = environ(unit["pid"])
        assert env.get("VLLM_LOGGING_PREFIX") == (None if unit["name"] == "proxy" else MARK)
        assert not {"PDCTL_OPERATOR_TOKENS", "PDCTL_VIEWER_TOKENS"} & set(env)
        assert OPERATOR not in json.dumps(env) and VIEWER not in json.dumps(env)

    # The proxy's /admin takes its own token, handed over in its environment only.
    token = (folder / "proxy-admin-token").read_text()
    proxy_pid = units["proxy"]["pid"]
    assert environ(proxy_pid)["PDCTL_ADMIN_TOKEN"] == token
    assert token not in Path(f"/proc/{proxy_pid}/cmdline").read_text()
    proxy_port = ports["proxy"]
    assert admin(proxy_port, "/groups/read/pause", None) == 401
    assert admin(proxy_port, "/groups/read/pause", "wrong") == 401
    assert admin(proxy_port, "/groups/read/resume", token) == 200
    shown = [
        plane.api("GET", f"/deployments/{name}/status"),
        plane.api("GET", f"/deployments/{name}/commands"),
        plane.api("GET", f"/events?deployment={name}"),
    ]
    assert token not in json.dumps(shown)
    assert (
        token not in plane.proc.log() and token not in (folder / "proxy" / "output.log").read_text()
    )

    # Private files: 0700 directories, 0600 run state, token, pid files and logs.
    assert mode(plane.runs) == mode(folder) == mode(folder / "decode-0") == 0o700
    for path in (
        "deployment.json",
        "proxy-admin-token",
        "decode-0/state.json",
        "decode-0/output.log",
    ):
        assert mode(folder / path) == 0o600, path

    # A killed instance's event quotes its last log line (the shim's log is where we look).
    os.kill(units["decode-0"]["pid"], signal.SIGKILL)
    plane.wait(
        name, lambda us: us["decode-0"]["restarts"] >= 1 and us["decode-0"]["state"] == "RUNNING"
    )
    _, events = plane.api("GET", f"/events?deployment={name}")
    [crash] = [e["message"] for e in events if e["kind"] in ("backoff", "exited")][:1]
    assert "decode-0" in crash and 'its last log line: "' in crash, crash

    # kill -9 of pdctl serve; a new one from the same directory adopts the very processes.
    units = plane.running(name)
    pids = {n: u["pid"] for n, u in units.items()}
    seen = shim_pids(plane.runs)
    plane.proc.kill()
    plane.start()
    # Registered again: the new control plane read the proxy's /admin with the kept token.
    adopted = plane.wait(
        name,
        lambda us: (
            all(u["state"] == "RUNNING" for u in us.values())
            and all(us[n]["registration"] for n in ("prefill-0", "decode-0"))
        ),
    )
    assert {n: u["pid"] for n, u in adopted.items()} == pids
    _, events = plane.api("GET", f"/events?deployment={name}")
    assert not [e for e in events if e["kind"] in ("port_held", "spawn_failed")]
    for unit in adopted.values():
        assert procfs.listening_pids(unit["ports"]["http"]) == {unit["pid"]}
        assert "already in use" not in (folder / unit["name"] / "output.log").read_text()
    assert admin(proxy_port, "/groups/read/pause", None) == 401  # and it is still guarded

    # Stop: no child and no shim left.
    assert plane.api("POST", f"/deployments/{name}/stop")[0] == 202
    plane.wait(name, lambda us: all(u["state"] == "STOPPED" for u in us.values()))
    seen += shim_pids(plane.runs)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(procfs.is_same_process(p, s) for p, s in seen):
        time.sleep(0.1)
    assert [p for p, s in seen if procfs.is_same_process(p, s)] == []
    for unit in adopted.values():
        assert procfs.listening_pids(unit["ports"]["http"]) == set()
