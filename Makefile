# The two entry points a newcomer needs: `make demo` and `make test`.
# Each does its own set-up: a virtualenv in .venv with the pinned dependencies.
# `make test` also runs the S3/SQS tests (marked aws) against LocalStack in host mode,
# which lives in a virtualenv of its own, .localstack-venv (scripts/localstack.sh).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LS_STAMP := .localstack-venv/.installed

.PHONY: setup demo test lint clean localstack-setup test-localstack

$(STAMP): requirements.lock pyproject.toml setup.py worker/kernel/_keybuffer.c worker/kernel/sha512_256.h fileformat/_sections.c fileformat/_encoder.cpp objectstore/_filemap.c
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
	$(MAKE) --no-print-directory test-localstack

$(LS_STAMP): scripts/localstack-requirements.txt
	PYTHON=$(PYTHON) scripts/localstack.sh install

localstack-setup:
	PYTHON=$(PYTHON) scripts/localstack.sh install

# The tests marked aws against LocalStack (port: COMPACTOR_LOCALSTACK_PORT, default 4566).
test-localstack: $(STAMP) $(LS_STAMP)
	scripts/localstack.sh test

clean:
	rm -rf $(VENV) .localstack-venv .localstack-run build *.egg-info
