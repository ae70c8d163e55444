# The two commands of the quick start: `make up` and `make test`.
# Everything they need is installed here, into .venv, on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: an unpinned torch (or one pulled in by another package)
# can be a multi-GB CUDA build. Elsewhere, point pip at a CPU index, e.g.
#   make test TORCH_PIP_ARGS='--index-url https://download.pytorch.org/whl/cpu'
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# Test files are spread over this many pytest processes (pytest-xdist, a file's tests stay together, so a
# module's stack is started once); 1 runs them in this process.
TEST_WORKERS ?= 2
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: up test install kernels proto schema lint clean

# `make up MODEL=path/to/checkpoint` serves a second model too (a cloud worker of its own; docs/policy.md).
MODEL ?=
up: $(STAMP) kernels
	$(BIN)/tandem up $(if $(MODEL),--model $(MODEL))

test: $(STAMP) kernels
	@command -v redis-server >/dev/null || [ -n "$$REDIS_URL" ] || \
		echo "note: no redis-server on PATH; tests that need Redis will fail. Install it (Debian/Ubuntu: apt-get install redis-server, macOS: brew install redis) or set REDIS_URL."
	$(BIN)/python -m proto.regen --check
	$(BIN)/python -m gateway.policy.json_schema --check
	$(BIN)/python -m tandem_sdk.normalization_gen --check
	$(BIN)/python -m gateway.api.fields --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

install: $(STAMP) kernels

# The C++ CPU kernels, compiled once into a versioned artifact (tandem_kernels/cpu_extension.py), which the
# worker loads and never builds; at once where it exists. Without a compiler it says so and goes on.
kernels: $(STAMP)
	$(BIN)/python -m tandem_kernels.cpu_extension

$(STAMP): pyproject.toml sdk/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Tandem needs Python >= 3.11; found $$($(PYTHON) --version 2>&1). Set PYTHON=python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(BIN)/pip install --quiet -e ./sdk -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

schema: $(STAMP)
	$(BIN)/python -m gateway.policy.json_schema

proto: $(STAMP)
	$(BIN)/python -m proto.regen

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .tandem .pytest_cache
