# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# One venv, two stamps: `make run` (and `make bench`) install the runtime dependencies only;
# `make test`, `make lint` and `make install` add the test extra (pytest, Playwright, mypy,
# NVRTC, ...) to the same venv (tests/test_lean_install.py).
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint install bench clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(TEST_STAMP): $(RUN_STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[test]'
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/zapverify serve --host $(HOST) --port $(PORT)

test: $(TEST_STAMP)
	$(PY) -m pytest -q

# Style and types: ruff (pycodestyle, pyflakes, isort, bugbear) and mypy, configured in pyproject.toml.
lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(RUN_STAMP)
	$(PY) bench/cpu_engine.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .cache
