# Two commands for a new user: `make preview` and `make test`. Each creates .venv from the
# pinned requirements on first use (and again whenever a requirements file changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
POLICY_VENV := policies/venv
STACK ?= dev
OUT ?= build/preview/$(STACK)
# Folder of upstream CRD JSON schemas (read in place, never copied into the project).
CRD_SCHEMA_DIR ?= $(abspath ../shared/crd-schemas)
export CRD_SCHEMA_DIR
export PULUMI_ERROR_OUTPUT_STRING := true

.PHONY: preview preview-all test bench pulumi-preview pulumi-up policy-venv venv clean help

help:
	@echo "make preview [STACK=dev] [OUT=build/preview/<stack>]  offline preview of a stack"
	@echo "make test                                            the whole test suite"
	@echo "make bench                                           preview benchmark (figures for the README)"
	@echo "make pulumi-preview STACK=prod                       real 'pulumi preview' with the policy pack"
	@echo "make pulumi-up STACK=prod                            real 'pulumi up' with the policy pack"

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	@touch $@

$(POLICY_VENV)/.installed: policies/requirements.txt constraints.txt
	@test -x $(POLICY_VENV)/bin/python || $(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r policies/requirements.txt -c constraints.txt
	@touch $@

venv: $(VENV)/.installed
policy-venv: $(POLICY_VENV)/.installed

preview: $(VENV)/.installed $(POLICY_VENV)/.installed
	$(PY) -m preview --stack $(STACK) --out $(OUT)

preview-all: $(VENV)/.installed $(POLICY_VENV)/.installed
	@for stack in dev staging prod; do $(PY) -m preview --stack $$stack --out build/preview/$$stack --quiet || exit 1; done

test: $(VENV)/.installed $(POLICY_VENV)/.installed
	$(PY) -m pytest

bench: $(VENV)/.installed $(POLICY_VENV)/.installed
	$(PY) benchmarks/bench_preview.py

# The real path, for users with the Pulumi CLI, a backend and cloud credentials.
pulumi-preview: $(VENV)/.installed $(POLICY_VENV)/.installed
	pulumi stack select $(STACK)
	pulumi preview --policy-pack policies

pulumi-up: $(VENV)/.installed $(POLICY_VENV)/.installed
	pulumi stack select $(STACK)
	pulumi up --policy-pack policies

clean:
	rm -rf build .pytest_cache
