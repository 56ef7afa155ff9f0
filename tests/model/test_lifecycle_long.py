"""The model-based lifecycle test (tests/model/lifecycle.py) at length: `make test-model`.
The seed comes from PDCTL_MODEL_SEED (default: a random one), printed first; every failure is
replayed by `make test-model PDCTL_MODEL_SEED=N` (PDCTL_MODEL_EXAMPLES and PDCTL_MODEL_STEPS
change the number of sequences and of steps in each). A failure is shrunk to its shortest
sequence of steps before it is reported."""

from __future__ import annotations

import os
import random
import sys

import pytest

from harness.processes import finally_on_sigterm
from tests.model.lifecycle import run

pytestmark = [pytest.mark.e2e, pytest.mark.model, pytest.mark.timeout(3600)]


def test_random_lifecycles_keep_every_invariant(tmp_path_factory):
    seed = int(os.environ.get("PDCTL_MODEL_SEED") or random.randrange(1 << 32))
    examples = int(os.environ.get("PDCTL_MODEL_EXAMPLES") or 8)
    steps = int(os.environ.get("PDCTL_MODEL_STEPS") or 15)
    print(
        f"\nmodel-based lifecycle test: PDCTL_MODEL_SEED={seed} "
        f"({examples} sequences of {steps} steps)",
        file=sys.stderr,
        flush=True,
    )
    finally_on_sigterm()  # a `timeout` or CI kill still stops every process it started
    try:
        run(lambda: tmp_path_factory.mktemp("lifecycle"), seed, examples, steps, shrink=True)
    except BaseException as exc:
        exc.add_note(f"replay: make test-model PDCTL_MODEL_SEED={seed}")
        raise
