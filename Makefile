# The two commands a new user runs: `make demo` and `make test`.
# Each creates .venv when missing and (re)installs the project with its dev extra whenever
# pyproject.toml changed; otherwise the install step is skipped.

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.metalflow-installed
DEMO_ARGS ?=
# The demo's worker serves /metrics, /livez, /readyz here (`metalflow dev --metrics-port`).
METRICS_PORT ?= 9464
PYTEST_ARGS ?=
# pytest runs modules in parallel (pytest-xdist): most tests wait on servers, not on CPU. Whole
# modules go to one worker (--dist loadfile), so a module's fixtures and order hold; each worker
# has its own Temporal servers (tests/conftest.py). PYTEST_WORKERS=0 runs in this process.
# Measured on the 2-core machine alone (as CI runs), 2026-11-27: 4 workers 11 min 43 s for 774
# tests at 140% CPU (1,003 CPU-s); 6 workers took longer (12 min 8 s, 1,145 CPU-s: more servers
# and more contention) and one test that waits on its server failed. Since then the tests wait
# more than they compute: 2026-11-29, 4 workers used 866 CPU-s in 704 s (1.2 of the 2 cores) for
# 1,907 tests, so a fifth worker fills waits rather than queueing for the cores: FIVE_WORKERS.
# More is not faster: 2026-11-30, 7 workers took 745 s of pytest with 3 tests failed (the cores
# saturate; the tests' own CPU, not their waits, bounds the run), 5 workers 567-587 s, green.
PYTEST_WORKERS ?= 5
# The tests write and reuse bytecode files (__pycache__/, git-ignored) even where the environment
# says not to (PYTHONDONTWRITEBYTECODE=1, as on this machine and in CI): every process the suite
# starts (each xdist worker's collection, simulated sites, workers, CLI commands) otherwise
# compiles the project and pytest's rewritten test modules from source again. Measured here,
# 2026-11-29: one collection of the suite 15.5 s of CPU without them, 3.7 s with.
BYTECODE := PYTHONDONTWRITEBYTECODE=
# Modules are handed out longest first (tests/module_order.py, from tests/module_seconds.json);
# --no-loadscope-reorder keeps that order instead of xdist's most-tests-first, which left the
# longest one- and two-test modules to the end of the run.

.PHONY: demo test check lint typecheck pytest fast install clean bench chaos prometheus-tools kubectl-tool

demo: $(STAMP)
	$(BIN)/metalflow dev --metrics-port $(METRICS_PORT) $(DEMO_ARGS)

# lint and typecheck (~60 s) run alongside pytest, whose workers mostly wait on servers: three jobs
# of one make, so a failure of any of them still fails `make test` (after the others finish).
test: $(STAMP)
	@$(MAKE) --no-print-directory -j3 lint typecheck pytest

# The inner loop (under a minute): lint, the import contracts, mypy and the fast tier (tests/fast:
# state objects and pure decisions, no server, no process), three jobs at once.
check: $(STAMP)
	@$(MAKE) --no-print-directory -j3 lint typecheck fast

fast: $(STAMP)
	$(BYTECODE) $(BIN)/pytest -p no:xdist -q tests/fast $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@# every test module imports (mypy does not read tests/): a moved name fails here, not in CI
	@$(BYTECODE) $(BIN)/pytest -p no:xdist -q --collect-only tests > /tmp/metalflow-collect.$$$$ 2>&1 \
	  || { tail -30 /tmp/metalflow-collect.$$$$; rm -f /tmp/metalflow-collect.$$$$; exit 1; }; rm -f /tmp/metalflow-collect.$$$$

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) prometheus-tools kubectl-tool
	$(BYTECODE) $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

install: $(STAMP)

# promtool (the alert rules' unit tests) and prometheus (the end-to-end alert test), from the
# Prometheus the OS packages: Debian/Ubuntu's `prometheus` package (apt-get, as root or through
# sudo). Elsewhere install Prometheus 2.x yourself so both are on PATH (README, Observability).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# $(call os_tool,COMMANDS,PACKAGE,WHAT,ELSE): nothing when every command is on PATH; else the OS
# package PACKAGE where apt knows it; else a clear error naming WHAT and where README says more.
define os_tool
	@if $(foreach c,$(1),command -v $(c) >/dev/null &&) true; then exit 0; fi; \
	if command -v apt-get >/dev/null; then \
		echo "installing $(3) from the OS packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
	else \
		echo "$(3) is needed by the tests: $(4)" >&2; \
		exit 1; \
	fi
endef

prometheus-tools:
	$(call os_tool,promtool prometheus,prometheus,Prometheus (promtool and prometheus),install Prometheus 2.x so both are on PATH (README: Observability))

# kubectl (the fidelity tests run the real client against the simulated API; the deploy tests render
# with `kubectl kustomize`), from the OS package `kubectl` where apt knows it; elsewhere install it
# yourself so it is on PATH (README, Two commands).
kubectl-tool:
	$(call os_tool,kubectl,kubectl,kubectl,install it so it is on PATH (README: Two commands))

# Figures, printed as JSON and written to .metalflow/bench.json (bench/README.md): the fleet's
# reprovision against the raw engine, reaction times, requests per DPU and per power cycle, the
# simulated site at 1,000 hosts, many monitors on one worker. Each benchmark is time-limited.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

# 100 hosts reprovisioned under faults while the worker is SIGKILLed every 20 s, the dev server
# once, and the site drops its watches; one JSON line (bench/chaos.py). tests/test_chaos.py runs
# a short version in `make test`.
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(BIN)/python bench/chaos.py $(CHAOS_ARGS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The stamp records a successful install of this pyproject.toml; a failed install leaves no
# stamp, so the next run retries.
# The install goes through uv (Astral's installer, itself installed by pip into the venv): it
# resolves from the same index (PyPI) as pip, downloads in parallel and byte-compiles on both
# cores. Measured on the 2-core machine, 2026-11-29, a fresh venv: pip 55 s (49 CPU-s, most of
# it compiling), uv 11 s with an empty uv cache's download. The install is on every clean clone's
# `make test` path (CI's), so it counted against the suite's 10 minutes. Where uv cannot run
# (no wheel for the platform, an index only pip is configured for: uv reads no pip.conf), the
# install falls back to pip, as before.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing metalflow and its dev tools into $(VENV) (skipped next time unless pyproject.toml changes)"
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv>=0.9' \
	  && $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]' \
	  || { echo "uv could not install; installing with pip instead"; \
	       PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'; }
	touch $(STAMP)

clean:
	rm -rf .metalflow .pytest_cache .mypy_cache .ruff_cache .import_linter_cache *.egg-info build dist
