# Two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test services llama-server venv dev lint typecheck clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed

dev: $(VENV)/.installed-dev

## Replay the bundled real trace (Azure LLM 2023) through Ebb's baselines on a virtual clock.
demo: venv
	$(BIN)/ebb simulate --report ebb-report.html --json ebb-scorecard.json --ledger ebb-ledger.sqlite

## Test services: etcd (ledger, leader election), Prometheus (live loop) and Chromium (report
## screenshots) binaries, installed when
## root; tests start them on loopback themselves (no systemd here). Without them those tests skip,
## except under CI=true, where they fail.
services:
	@if { ! command -v etcd >/dev/null || ! command -v prometheus >/dev/null || ! command -v chromium >/dev/null; } \
		&& [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server prometheus chromium; fi

## llama.cpp's llama-server for the real-engine live test, built once into ~/.cache/ebb (needs a C++
## compiler and cmake, apt-installed when root; about 10 CPU-minutes the first time, instant after).
## Without it that test skips, except under CI=true, where it fails.
llama-server: $(BIN)/python
	@if [ "$$(id -u)" = 0 ] || command -v cmake >/dev/null; then PYTHON=$(BIN)/python bash scripts/build-llama-server.sh; \
		else echo "skipping the llama-server build (not root, no cmake): the llama.cpp test will skip"; fi

## Install dev dependencies and run every check: import contracts, mypy, the test suite.
test: dev services llama-server
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache
