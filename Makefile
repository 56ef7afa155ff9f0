# The few verbs of pdctl. Every target sets up .venv itself, so each works on a fresh machine.
VENV := .venv
PY := $(VENV)/bin/python
# Types over the product, harness and benchmarks ([tool.mypy]); incremental via .mypy_cache.
TYPECHECK := $(VENV)/bin/mypy
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: run run-cluster test test-calibrate test-live test-model test-vllm test-ray lint bench-core bench-sim bench-proxy bench-ttft bench-switch bench-autopilot bench-plan-live bench-events bench-cluster bench-measure bench-bidir bench-render bench-frontend soak soak-quick chaos clean system-deps docs

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# The dashboard on http://127.0.0.1:8000 with the demo (stand-in engine): into an empty
# database it stores the tiny 'demo' (not started) and starts the simulated trade pair
# (services/demo/trade.py) under load; a later run adopts the pair and resumes its load.
run: $(STAMP)
	@echo "pdctl dashboard: http://127.0.0.1:8000/  (simulated trade: sim-qwen3-colocated vs sim-qwen3-disagg under load, figures after a minute; tiny 'demo': Start, then Run load)"
	PDCTL_DEMO=1 PDCTL_DEMO_TRADE=1 $(PY) pdctl.py serve --host 127.0.0.1 --port 8000

# The same on a local Ray cluster (head 127.0.0.4, workers 127.0.0.2 and .3 with 2 GPUs each)
# with the demo's prefill and decode on different nodes; Ctrl-C stops pdctl serve and the cluster.
run-cluster: $(STAMP)
	$(PY) -m harness.run_cluster

# Most tests wait on subprocesses, sockets and browsers rather than compute: three workers on
# two cores run them in under half the time (four were faster still, and flakier). Each
# worker draws ports from its own slice (harness/processes.py worker_share); a file's tests
# stay on one worker (module fixtures).
XDIST := -n 3 --dist loadfile

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TYPECHECK)
	$(PY) -m pytest -q $(XDIST) -m "not vllm and not ray and not live_window and not tiers and not story and not model and not calibrate"

# Issue 38's closed loop: stand-ins on H100, the planner told L40S; `pdctl calibrate` on
# benches at 3 and 8 req/s must forecast TTFT and ITL p50 at 5 req/s within 15% of the live
# stand-in, where the datasheet is off by more. Three bounded benches: ~1-1.5 min. Then a
# running stand-in 1P1D calibrated on its own traffic through `pdctl serve`: ~50 s.
test-calibrate: $(STAMP)
	$(PY) -m pytest -q -s -m calibrate tests/simulator/plan/calibration/test_fitting_loop.py \
		tests/e2e/measure/test_calibrate_live.py

# End-to-end tests that wait out a window of live frames on stand-ins (the demo's trade after a
# minute, PD not happening caught within a window, the canary within a period, each advisor
# proposal applied and its signal measured before and after), the encode and render tiers
# end to end: ~3 min (four workers: the tests wait, they do not compute). Then issue 34's
# story of changes under load (tests/e2e/rollout/test_story.py, ~2.5 min) alone: its 4 req/s
# and restarts beside them skewed the autopilot test's measured demand.
test-live: $(STAMP)
	$(PY) -m pytest -q -n 4 --dist load -m "live_window or tiers" tests/e2e
	$(PY) -m pytest -q -m story tests/e2e

# The model-based lifecycle test at length (tests/model/lifecycle.py): random sequences of
# operator actions and faults against a real `pdctl serve` under load, every invariant checked
# after each step; 8 sequences of up to 15 steps, ~4-5 min (10 min on a loaded machine); a
# failure is shrunk (Hypothesis gives up shrinking after 5 min). The seed is PDCTL_MODEL_SEED (default random), printed first:
# `make test-model PDCTL_MODEL_SEED=N` replays a run (PDCTL_MODEL_EXAMPLES, PDCTL_MODEL_STEPS:
# how many sequences, how many steps each).
test-model: $(STAMP)
	PDCTL_MODEL_SEED=$(PDCTL_MODEL_SEED) $(PY) -m pytest -q -s -m model tests/model

# Tests on a real local Ray cluster (a head and workers on 127.0.0.2-5, started by the tests,
# every Ray process stopped after them): placement, load, switch, adoption and node loss.
test-ray: $(STAMP)
	timeout 1500 $(PY) -m pytest -q -m ray tests/ray

# Tests against real vLLM (CPU build, see README): its venv is cached outside the clone, keyed
# on the hash of its pinned requirements; the tiny model is cached keyed on its script's hash.
VLLM_FIXTURES := tests/fixtures/vllm
TINY_MODEL := $(HOME)/.cache/pdctl/tiny-llama-$(shell sha1sum $(VLLM_FIXTURES)/make_tiny_model.py | cut -c1-12)
test-vllm: $(STAMP)
	set -e; venv=$$(bash $(VLLM_FIXTURES)/setup_venv.sh); \
	if [ ! -f $(TINY_MODEL)/config.json ]; then \
		rm -rf $(TINY_MODEL).tmp; \
		$$venv/bin/python $(VLLM_FIXTURES)/make_tiny_model.py $(TINY_MODEL).tmp; \
		mv $(TINY_MODEL).tmp $(TINY_MODEL); \
	fi; \
	PDCTL_VLLM_PYTHON=$$venv/bin/python PDCTL_TINY_MODEL=$(TINY_MODEL) \
		$(PY) -m pytest -q --durations=30 -m vllm tests/vllm

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TYPECHECK)

# The docs site (mkdocs.yml, docs/) into site/; strict: a broken link or anchor, or a page left
# out of the nav, fails the build (tests/test_docs.py builds it the same way in make test).
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

bench-core: $(STAMP)
	$(PY) -m benchmarks.bench_core

bench-sim: $(STAMP)
	$(PY) -m benchmarks.bench_sim

bench-bidir: $(STAMP)
	$(PY) -m benchmarks.bidir_kv

bench-render: $(STAMP)
	$(PY) -m benchmarks.frontend.render_tier

bench-switch: $(STAMP)
	$(PY) -m benchmarks.bench_switch

bench-autopilot: $(STAMP)
	$(PY) -m benchmarks.autopilot

bench-plan-live: $(STAMP)
	$(PY) -m benchmarks.bench_plan_live

bench-proxy: $(STAMP)
	$(PY) -m benchmarks.proxy.bench

# Where each TTFT went: 100 requests through a MoRIIO read pair and a write pair of stand-ins.
bench-ttft: $(STAMP)
	$(PY) -m benchmarks.ttft_breakdown

# Real vLLM's API server CPU (skipped without make test-vllm's venv): per request, per prompt
# token and per output token, over four workloads.
bench-frontend: $(STAMP)
	$(PY) -m benchmarks.frontend.cpu

# vLLM's own client (`vllm bench serve`, from the real-vLLM venv) and `pdctl bench` against the
# same stand-ins and workload, direct and through the proxy, at several rates.
bench-measure: $(STAMP)
	$(PY) -m benchmarks.measure.run

# A deployment under `pdctl serve` at 8 req/s for SOAK_MINUTES (default 30): RSS and open file
# descriptors of every process, sampled; fails when one grows past its bound after warm-up.
SOAK_MINUTES ?= 30
soak: $(STAMP)
	$(PY) -m benchmarks.soak.run --minutes $(SOAK_MINUTES)

# The short form CI runs.
soak-quick: $(STAMP)
	$(PY) -m benchmarks.soak.run --quick

# Ray against local processes: start-to-serving of a 1P1D, pdctl serve's CPU with 32 instances
# on 4 Ray nodes (a local cluster on 127.0.0.21-25, about 10 minutes).
bench-cluster: $(STAMP)
	$(PY) -m benchmarks.bench_cluster

# Store write -> websocket event, against the last commit that polled SQLite for events.
EVENTS_BASELINE ?= 3696758
bench-events: $(STAMP)
	$(PY) -m benchmarks.bench_events --baseline $(EVENTS_BASELINE)

# A fault campaign on real processes under load (about 5 minutes); QUICK=1 for the short one.
# LAYOUT=2p2d: with spares, and last a worker of a local Ray cluster (127.0.0.31-34) lost.
chaos: $(STAMP)
	$(PY) -m benchmarks.chaos.campaign $(if $(QUICK),--quick) $(if $(LAYOUT),--layout $(LAYOUT))

# Debian packages some tests use (they skip without them); needs root, as CI has.
SYSTEM_PACKAGES := docker-compose prometheus chromium wrk tmux
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info site
