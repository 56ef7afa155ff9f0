"""Fixtures for the tests against real vLLM (CPU build): one `pdctl serve` per session whose
vLLM launcher is the vLLM venv's python, and the greedy outputs of a colocated vLLM deployment
that the disaggregated ones must reproduce. At most one vLLM deployment runs at a time."""

from __future__ import annotations

import contextlib
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.e2e.serve.test_control_plane import ControlPlane
from tests.vllm import harness
from tests.vllm.autogroup import engines_yield

# One request at a time, short greedy outputs: batching changes bf16 numerics.
MAX_TOKENS = 12
# (kind, prompt seed) of the requests compared between colocated and disaggregated runs.
REFERENCE_REQUESTS = (("completion", 1), ("completion", 2), ("chat", 3), ("chat", 4))


@dataclass(frozen=True)
class VllmSetup:
    python: Path
    model: Path
    marker: str  # every deployment process inherits harness.MARKER=<this>


@dataclass(frozen=True)
class Output:
    text: str
    prompt_tokens: int
    completion_tokens: int


@pytest.fixture(scope="session")
def vllm_setup() -> Iterator[VllmSetup]:
    python, model = harness.vllm_python(), harness.tiny_model()
    if not python.exists() or not (model / "config.json").exists():
        pytest.skip(f"no vLLM venv ({python}) or tiny model ({model}): run `make test-vllm`")
    setup = VllmSetup(python, model, uuid.uuid4().hex)
    with engines_yield(setup.marker):  # every engine's session, below the rest (autogroup.py)
        yield setup


def vllm_env(setup: VllmSetup) -> dict[str, str]:
    """What a control plane needs to run vLLM deployments: the vLLM venv's python as the
    launcher, at a lower priority (harness.ENGINE_NICE), and env overrides on (for the
    marker's, harness.MARKER_OVERRIDE)."""
    launcher = [*harness.ENGINE_NICE, str(setup.python), "-m", "vllm.entrypoints.openai.api_server"]
    return {"PDCTL_VLLM_LAUNCHER": shlex.join(launcher), "PDCTL_ALLOW_CODE_ENV": "true"}


@pytest.fixture(scope="session")
def plane(tmp_path_factory, vllm_setup):
    # The ExampleConnector pairs keep KV under this session's temporary folder.
    roots = {"PDCTL_ENGINE_PATH_ROOTS": str(tmp_path_factory.getbasetemp())}
    plane = ControlPlane(tmp_path_factory.mktemp("plane"), {**vllm_env(vllm_setup), **roots})
    plane.read_timeout = plane.write_timeout = harness.PLANE_TIMEOUT_S
    plane.start()
    try:
        yield plane
    finally:
        plane.close()


@contextlib.contextmanager
def deployed(plane: ControlPlane, spec: dict, setup: VllmSetup):
    """Create and start `spec` through the API; stop it (and kill what is left) at the end."""
    live = None
    try:
        live = harness.start(plane, spec, setup.model)
        yield live
    finally:
        with contextlib.suppress(AssertionError, TimeoutError, OSError):
            harness.stop(plane, spec["name"])
        if live is not None and harness.wait_gone(live, setup.model, setup.marker, 10):
            harness.kill_groups(live)


def client(live: harness.Live) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=live.proxy_url + "/v1", api_key="none", timeout=120, max_retries=0
    )


def greedy(api: openai.OpenAI, model: Path, kind: str, seed: int) -> Output:
    if kind == "completion":
        reply = api.completions.create(
            model=str(model), prompt=harness.prompt(seed), max_tokens=MAX_TOKENS, temperature=0
        )
        text = reply.choices[0].text
    else:
        reply = api.chat.completions.create(
            model=str(model),
            messages=[{"role": "user", "content": harness.prompt(seed)}],
            max_tokens=MAX_TOKENS,
            temperature=0,
        )
        text = reply.choices[0].message.content or ""
    return Output(text, reply.usage.prompt_tokens, reply.usage.completion_tokens)


@pytest.fixture(scope="session")
def reference(plane, vllm_setup) -> dict[tuple[str, int], Output]:
    """Greedy outputs of a colocated vLLM deployment (through its proxy), one at a time."""
    spec = harness.colocated_spec("colo", vllm_setup.model, vllm_setup.marker)
    with deployed(plane, spec, vllm_setup) as live:
        api = client(live)
        return {
            (kind, seed): greedy(api, vllm_setup.model, kind, seed)
            for kind, seed in REFERENCE_REQUESTS
        }


def pytest_terminal_summary(terminalreporter) -> None:
    if harness.START_TIMES:
        times = ", ".join(f"{n} {s:.0f} s" for n, s in harness.START_TIMES.items())
        terminalreporter.write_line(f"vLLM deployments, start to first request served: {times}")
