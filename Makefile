# The two commands of the README: `make demo` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
TORCH_CPU_VERSION ?= 2.13.0

.PHONY: demo test install install-dev lint clean-workspace

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Install torch first when the venv has none, so the project's torch>=2.3 range is already
# satisfied and pip does not pull a multi-GB CUDA build on a CPU machine.
$(VENV)/.torch: $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "torch==$(TORCH_CPU_VERSION)"
	@touch $@

$(VENV)/.installed: $(VENV)/.torch pyproject.toml
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e ".[dev,hf]"
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

test: install-dev
	$(BIN)/python -m pytest -q

lint: install-dev
	$(BIN)/ruff check bertwb tests benchmarks

clean-workspace:
	rm -rf .bertwb
