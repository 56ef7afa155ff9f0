# The few verbs of pdctl. Every target sets up .venv itself, so each works on a fresh machine.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: run test lint bench-core bench-sim bench-proxy bench-switch clean system-deps

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# Until the dashboard lands, `make run` starts a stand-in engine and says how to reach it.
run: $(STAMP)
	$(PY) pdctl.py sim --port 8100

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench-core: $(STAMP)
	$(PY) -m benchmarks.bench_core

bench-sim: $(STAMP)
	$(PY) -m benchmarks.bench_sim

bench-switch: $(STAMP)
	$(PY) -m benchmarks.bench_switch

bench-proxy: $(STAMP)
	$(PY) -m benchmarks.bench_proxy

# Debian packages some tests use (they skip without them); needs root, as CI has.
SYSTEM_PACKAGES := docker-compose
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
