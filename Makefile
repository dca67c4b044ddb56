# `make demo` and `make test` work on a fresh machine: they build .venv with Python 3.12
# (current mitmproxy needs it; plain python3 here may be 3.11) and install the project into it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

PYTHON312 := $(shell for c in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$c -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$c; break; }; done)

.PHONY: venv demo test test-fast test-engines lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (tried python3.12 and pyenv versions)"; exit 2; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Ray (replay --ray) only for the runs that use it: its tests are long runs, and it is the largest install
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $(RAY_STAMP)

demo: $(STAMP)
	$(VENV)/bin/llmreplay demo --out demo-out

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# everything but the real engines and the long runs (accuracy searches, end-to-end runs of 15 s or more:
# tests/long_runs.py); those run in test-engines
test: $(STAMP) lint
	$(VENV)/bin/pytest -q -m "not long" --ignore=tests/engines

# the in-process tests: those marked e2e (they start processes; tests/e2e_marker.py holds the rule) left out
test-fast: $(STAMP) lint
	$(VENV)/bin/pytest -q -m "not e2e and not long" --ignore=tests/engines

# Real engines (vLLM CPU, llama.cpp llama-server) built once into ~/.cache/llmreplay/engines (or the
# folder in LLMREPLAY_ENGINE_CACHE): ~7-12 min cold for the llama.cpp build, seconds when cached. An engine whose
# prerequisite the machine lacks (cmake, the torch wheel, Python 3.11) is left out and its tests skip.
# Also the long runs (marker `long`): the accuracy searches against the sim (capacity found within 10% of the
# model) and the end-to-end runs of 15 s or more listed in tests/long_runs.py.
# And Debian's prometheus (with promtool) and prometheus-pushgateway, unpacked into ~/.cache/llmreplay/tools
# (tests/prometheus_setup.py: apt-get download + dpkg -x, no service) for tests/e2e/observe.
test-engines: $(RAY_STAMP)
	$(PY) tests/engines/engine_setup.py --allow-missing
	$(PY) tests/prometheus_setup.py --allow-missing
	$(VENV)/bin/pytest -q -m engines tests/engines
	$(VENV)/bin/pytest -q -m long --ignore=tests/engines

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) demo-out .pytest_cache
