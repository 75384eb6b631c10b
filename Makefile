# The two entry points a newcomer needs: `make demo` and `make test`.
# Each does its own set-up: a virtualenv in .venv with the pinned dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint clean

$(STAMP): requirements.lock pyproject.toml setup.py worker/kernel/_keybuffer.c worker/kernel/sha512_256.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip==26.3"
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/compactor demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

clean:
	rm -rf $(VENV) build *.egg-info
