# Two set-up commands: `make test` and `make demo`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch is pinned: on these machines pip takes 2.13.0 from a local CPU wheel, while any
# other spec resolves to a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: test demo install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test]" "$(TORCH_PIN)"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m k3.cli.main demo --out demo-checkpoint

clean:
	rm -rf $(VENV) demo-checkpoint
