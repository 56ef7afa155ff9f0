"""pdctl's copy of vLLM's default-selection logic, held against vLLM's own code.

vLLM's `EngineArgs.get_batch_defaults` runs in the vLLM venv with the platform made to report
each hardware profile's memory and name; its answer must be ours for both usage contexts and
for TP 1 and 8.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from domain import profiles
from domain.engine.defaults import batch_tier
from tests.vllm import harness

pytestmark = pytest.mark.vllm

# Runs inside the vLLM venv: argv[1] is a JSON list of [name, bytes, is_cpu, world_size].
PROBE = """
import json, sys
from vllm.engine import arg_utils
from vllm.usage.usage_lib import UsageContext

class Device:
    def __init__(self, memory, name, cpu):
        self.memory, self.name, self.cpu = memory, name, cpu
    def get_device_total_memory(self): return self.memory
    def get_device_name(self): return self.name
    def is_tpu(self): return False
    def is_cpu(self): return self.cpu

out = []
for name, memory, cpu, world in json.loads(sys.argv[1]):
    arg_utils.current_platform = Device(memory, name, cpu)
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world)
    out.append({usage: [tokens[ctx], seqs[ctx]] for usage, ctx in (
        ("api_server", UsageContext.OPENAI_API_SERVER), ("llm_class", UsageContext.LLM_CLASS))})
print(json.dumps(out))
"""


def test_batch_defaults_match_vllms_own_selection():
    python = harness.vllm_python()
    if not python.exists():
        pytest.skip(f"no vLLM venv ({python}): run `make test-vllm`")
    cases = [(name, world) for name in profiles.available("hardware") for world in (1, 8)]
    devices = [
        [
            profiles.hardware(name).display_name,
            int(profiles.hardware(name).hbm_bytes),
            name == "cpu",
            world,
        ]
        for name, world in cases
    ]
    done = subprocess.run(
        [str(python), "-c", PROBE, json.dumps(devices)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for (name, world), answer in zip(cases, theirs, strict=True):
        for usage in ("api_server", "llm_class"):
            tokens, seqs, _ = batch_tier(profiles.hardware(name), world, usage)
            assert [tokens, seqs] == answer[usage], (name, world, usage)
