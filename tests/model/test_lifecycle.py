"""The model-based lifecycle test (tests/model/lifecycle.py) in its short form for `make
test`: a few steps from a fixed seed. Hypothesis always tries the simplest sequence first (five
aborts that find nothing to abort, a second or two on a fresh deployment), so two sequences
run: that one and the seed's. `make test-model` runs it longer, from a seed it prints."""

from __future__ import annotations

import pytest

from tests.model.lifecycle import run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
SEED = 14  # NIXL: an undo with nothing to undo, pdctl serve SIGKILLed, an apply by hold
STEPS = 5


def test_a_few_actions_and_faults_keep_every_invariant(tmp_path_factory):
    run(lambda: tmp_path_factory.mktemp("lifecycle"), SEED, examples=2, steps=STEPS, shrink=False)
