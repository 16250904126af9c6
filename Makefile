# The two commands of the README: `make demo` and `make test`. Both are idempotent.
#
# Both install the locked set in requirements/ (exact versions with hashes that the suite has passed on),
# not whatever is newest today: a fresh clone gets what CI tested. `make test-latest` tries the newest
# versions pyproject.toml allows; `make lock` re-resolves the lock and reruns the suite on it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
TORCH_CPU_VERSION ?= 2.13.0
# Where pip finds torch when the venv has none. Empty: pip's default index, whose Linux torch is the CUDA
# build (several GB of GPU libraries). On a machine without a GPU, pass PyTorch's CPU-only wheel index
# (the pip command of the install selector on PyTorch's site names it): make install TORCH_INDEX_URL=...
TORCH_INDEX_URL ?=
TORCH_PIP    = $(BIN)/pip install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL) )"torch==$(TORCH_CPU_VERSION)"
LOCK_RUNTIME = requirements/runtime.txt
LOCK_DEV     = requirements/dev.txt
# --no-deps: the lock is complete (pip check proves it below) and leaves torch, the one unlocked package,
# to the step before, so a CUDA build installed into the venv by hand is kept.
PIP_LOCKED   = $(BIN)/pip install --quiet --require-hashes --no-deps

.PHONY: demo test test-latest lock install install-dev lint clean-workspace slow-tests

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Install torch first when the venv has none (from TORCH_INDEX_URL when set), so the project's torch>=2.3
# range is already satisfied and no later step picks a build: a torch installed into the venv by hand stays.
$(VENV)/.torch: $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_PIP)
	@touch $@

$(VENV)/.installed: $(VENV)/.torch $(LOCK_RUNTIME) pyproject.toml
	$(PIP_LOCKED) -r $(LOCK_RUNTIME)
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/pip check
	@touch $@

$(VENV)/.installed-dev: $(VENV)/.installed $(LOCK_DEV)
	$(PIP_LOCKED) -r $(LOCK_DEV)
	$(BIN)/pip check
	@touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# Run the whole pipeline on sample_corpus/ with the default bertwb.yaml; fresh stages are skipped.
demo: install
	$(BIN)/bertwb run
	$(BIN)/bertwb status
	$(BIN)/bertwb sql "select * from corpus_stats"
	$(BIN)/bertwb fill-mask "captain jonas scrubbed the nautical [MASK] in the harbour ." "pavel baked the crispy [MASK] slowly ." --top-k 3
	$(BIN)/bertwb nsp "Captain Jonas scrubbed the nautical deck in the harbour." "Then Jonas steered the breezy yacht out of the marina."
	$(BIN)/bertwb nsp "Captain Jonas scrubbed the nautical deck in the harbour." "Pavel baked the crispy croissants slowly."
	$(BIN)/bertwb sql "select metric, round(value, 4) as value from finetune_metrics where task = 'sentiment' and metric like 'dev_%'"
	printf '%s\n' "The crème brûlée at Café Lumière was superb, and we will definitely return." \
		"The service was awful, and I regret going." | $(BIN)/bertwb predict sentiment

# The suite runs in a new random order each time (pytest-randomly); its last line says how to repeat one.
# Two worker processes (pytest-xdist), TEST_WORKERS=0 for one: each test is single-threaded (conftest sets
# one torch thread), so a second process is what uses a second core. loadgroup keeps the tests of a module
# fixture on one worker, so no fixture is built twice.
TEST_WORKERS ?= 2
test: install-dev
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# After a full `make test`: the tests that took 10 s or more, from pytest's cache into tests/slow_tests.json,
# which a run without that cache (a fresh clone, CI) reads to start them first.
slow-tests:
	$(BIN)/python -c 'import json, pathlib; seconds = json.loads(pathlib.Path(".pytest_cache/v/bertwb/test_seconds").read_text()); pathlib.Path("tests/slow_tests.json").write_text(json.dumps({k.split("@")[0]: round(v, 1) for k, v in sorted(seconds.items()) if v >= 10}, indent=1) + "\n")'

# The suite on the newest versions pyproject.toml allows, in a venv of its own: run before `make lock`.
test-latest: VENV = .venv-latest
test-latest:
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_PIP)
	$(BIN)/pip install --quiet --upgrade -e ".[dev,hf]"
	$(BIN)/python -m pytest -q

# Re-resolve requirements/*.txt to the newest versions pyproject.toml allows (against the CPU torch),
# reinstall .venv from them and rerun the suite. Commit the new lock only when the suite passes.
PIP_COMPILE = $(BIN)/pip-compile --quiet --upgrade --generate-hashes --strip-extras --unsafe-package torch \
	--no-emit-index-url --no-emit-find-links -c requirements/torch-cpu.txt
lock: $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip pip-tools
	$(PIP_COMPILE) --extra dev --extra hf --extra ray --output-file $(LOCK_DEV) pyproject.toml
	$(PIP_COMPILE) -c $(LOCK_DEV) --output-file $(LOCK_RUNTIME) pyproject.toml
	$(MAKE) test

lint: install-dev
	$(BIN)/ruff check bertwb tests benchmarks

clean-workspace:
	rm -rf .bertwb
