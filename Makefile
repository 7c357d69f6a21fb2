# The two front-door commands: `make demo` and `make test` (README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test unit integration schemas examples bench clean

demo: $(VENV)/.core
	$(BIN)/faultline classify examples/traces/mixed.jsonl
	@echo "(the core install: for every command, $(BIN)/pip install -e '.[all]')"

test: $(VENV)/.all
	$(BIN)/python -m pytest -q

unit: $(VENV)/.all
	$(BIN)/python -m pytest -q tests/unit

integration: $(VENV)/.all
	$(BIN)/python -m pytest -q tests/integration

schemas: $(VENV)/.core
	$(BIN)/faultline schemas

examples: $(VENV)/.all
	$(BIN)/python -m tests.unit.make_examples

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.core: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	touch $@

# constraints.txt pins Faust, mode, aiokafka and kafka-python to the versions the patches
# of app/stream/faust_fixes.py were written against (docs/streaming.md, Upgrading Faust).
$(VENV)/.all: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[stream,bridge,test]'
	touch $@ $(VENV)/.core

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
