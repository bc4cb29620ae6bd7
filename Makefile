# The two commands a newcomer types: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# Python may write its bytecode cache (src/**/__pycache__, ignored by git) even where the
# environment forbids it: without it every one of the suite's hundreds of `python -m treadle`
# and server processes compiles Treadle's modules again (0.1-0.5 s of CPU each).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo examples test test-fast soak lint typecheck format bench clean browser sandbox

# The OpenHands SDK's own client (tests/interop/test_sdk_client*.py drive Treadle with it), in
# a Python 3.12 venv of its own beside .venv: made once, reused. The client needs openhands-sdk
# only (openhands-tools is the server's side).
SDK_PYTHON ?= $(shell pyenv prefix 3.12.1 2>/dev/null || echo /root/.pyenv/versions/3.12.1)/bin/python
SDK_VENV := .venv-sdk
SDK_STAMP := $(SDK_VENV)/.installed-stamp

$(SDK_STAMP):
	$(SDK_PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/pip install --quiet --upgrade pip
	$(SDK_VENV)/bin/pip install --quiet 'openhands-sdk==1.58.2'
	touch $(SDK_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,eval]'
	touch $(STAMP)

# The demo's tools run in a bubblewrap sandbox (the default): Debian's package when missing.
demo: $(STAMP) sandbox
	$(BIN)/treadle demo

examples: $(STAMP)
	@bash examples/seed/demo.sh $(abspath $(BIN))/treadle

lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over src/treadle, strict on the whole package
# ([tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The Canvas's browser tests drive Debian's Chromium (never a browser build downloaded by a tool).
browser:
	[ -x /usr/bin/chromium ] || (apt-get update && apt-get install -y chromium)

# The terminal's sandbox (and its escape tests) need bubblewrap; Debian's package.
sandbox:
	[ -x /usr/bin/bwrap ] || (apt-get update && apt-get install -y bubblewrap)

# The whole suite on every core (pytest-xdist): TEST_WORKERS processes, two per core by default,
# because a third of a test's time is spent waiting (on a child process, a poll, a disk), not
# computing; `make test TEST_WORKERS=0` runs it in this one process. Lint and type checks run
# beside the tests, niced, and their output comes after the tests'; either failing fails it.
# PostgreSQL: $$TREADLE_TEST_POSTGRES, else the machine's at 127.0.0.1:5432, else a private server
# made for this run and removed after (tests/support/private_postgres.py).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist worksteal

test: $(STAMP) browser sandbox $(SDK_STAMP)
	@lint_log=$$(mktemp); \
	nice -n 10 $(MAKE) --no-print-directory lint > "$$lint_log" 2>&1 & lint_pid=$$!; \
	$(BIN)/python tests/support/private_postgres.py $(BIN)/pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS); \
	tests_rc=$$?; wait $$lint_pid; lint_rc=$$?; \
	echo "--- make lint (ruff check, ruff format --check, mypy) ---"; cat "$$lint_log"; \
	rm -f "$$lint_log"; \
	[ $$lint_rc -eq 0 ] || echo "make test: lint or type check failed (exit $$lint_rc)"; \
	[ $$tests_rc -eq 0 ] || echo "make test: tests failed (exit $$tests_rc)"; \
	[ $$tests_rc -eq 0 ] && [ $$lint_rc -eq 0 ]

# The quick loop while working: no Chromium, no PostgreSQL, nothing marked slow, no lint.
test-fast: $(STAMP) sandbox
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not slow and not browser and not postgres" $(PYTEST_ARGS)

# Many more random sequences of operations on a conversation than `make test` runs.
soak: $(STAMP)
	TREADLE_SOAK=$${TREADLE_SOAK:-300} $(BIN)/pytest tests/runtime/test_state_machine_random.py -q

bench: $(STAMP)
	$(BIN)/treadle bench core

clean:
	rm -rf $(VENV) $(SDK_VENV) .pytest_cache .ruff_cache .mypy_cache build src/*.egg-info
