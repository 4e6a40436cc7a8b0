# Two commands for a new user: `make preview` and `make test`. Each creates .venv from the
# pinned requirements on first use (and again whenever a requirements file changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The policy pack a preview runs. Pull-request CI points it at the default branch's checkout
# (POLICY_PACK=trusted/policies), so a pull request cannot loosen the rules it is checked by; its
# virtualenv is built from that checkout's own requirements and constraints.
POLICY_PACK ?= policies
POLICY_VENV := $(POLICY_PACK)/venv
POLICY_CONSTRAINTS := $(dir $(abspath $(POLICY_PACK)))constraints.txt
STACK ?= dev
OUT ?= build/preview/$(STACK)
# Upstream CRD schemas (datreeio/CRDs-catalog layout), read in place and never committed: the
# shared copy beside this checkout when there is one, else a checkout of the catalog made on
# first use (git-ignored).
CRD_CATALOG_REF := 7b1e26ef9deea49293714d204c1a2270aab1178f
CRD_SCHEMA_DIR ?= $(or $(wildcard $(abspath ../shared/crd-schemas)),$(CURDIR)/crd-schemas)
export CRD_SCHEMA_DIR
export PULUMI_ERROR_OUTPUT_STRING := true

.PHONY: canary-try perf-venv real-servers upstream-sources preview preview-all test golden docs policy-facts release-record bench pulumi-policy-config pulumi-preview pulumi-up policy-venv venv bytecode crd-schemas clean help

help:
	@echo "make preview [STACK=dev] [OUT=build/preview/<stack>]  offline preview of a stack"
	@echo "make test                                            the whole test suite"
	@echo "make bench                                           preview and gateway benchmarks (figures for the README)"
	@echo "make golden                                          record every stack's preview output as expected"
	@echo "make pulumi-preview STACK=prod                       real 'pulumi preview' with the policy pack"
	@echo "make pulumi-up STACK=prod                            real 'pulumi up' with the policy pack"

# Every virtualenv is made and filled by uv (PyPI's `uv`, pinned in requirements-uv.txt, itself installed by pip
# into .venv-uv on first use): the same pinned requirements as pip would take, downloaded in parallel into uv's
# cache, which is per user, so a second checkout on the machine downloads nothing (.venv-perf: 38 s with pip
# and no cache, 4 s with uv and an empty one). Each install says what it installs and how long it took. `--seed`
# puts pip in each virtualenv too, as `python -m venv` did (the Pulumi CLI may install a policy pack's requirements).
# `--compile-bytecode` writes the packages' .pyc as pip does: where PYTHONDONTWRITEBYTECODE is set, nothing else would,
# and every process (the preview, the pack, the servers the tests start) would compile its imports again.
UV_VENV := $(CURDIR)/.venv-uv
UV := $(UV_VENV)/bin/uv
# $(call uv_install,<virtualenv>,<pip install arguments>)
define uv_install
	@test -x $(UV) || { $(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $(CURDIR)/requirements-uv.txt; }
	@echo "installing $(1): $(2)"
	@start=$$(date +%s%N); \
	{ test -x $(1)/bin/python || $(UV) venv --quiet --seed --no-python-downloads --python $(PYTHON) $(1); } && \
	$(UV) pip install --quiet --strict --compile-bytecode --python $(1)/bin/python $(2) && \
	echo "installed $(1) in $$(( ($$(date +%s%N) - start) / 1000000 )) ms"
endef

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt requirements-uv.txt
	$(call uv_install,$(VENV),-r requirements-dev.txt -c constraints.txt)
	@touch $@

$(POLICY_VENV)/.installed: $(POLICY_PACK)/requirements.txt $(POLICY_CONSTRAINTS)
	$(call uv_install,$(POLICY_VENV),-r $(POLICY_PACK)/requirements.txt -c $(POLICY_CONSTRAINTS))
	@touch $@

venv: $(VENV)/.installed
policy-venv: $(POLICY_VENV)/.installed

# The real servers the suite starts on loopback. MLflow gets a virtualenv of its own (its many
# dependencies would otherwise constrain the program's). Prometheus and promtool come from
# Debian's `prometheus` package, installed when missing where we may (as root); elsewhere the
# tests that need it skip, and `.ci/run` (REQUIRE_REAL_SERVERS=1) turns such a skip into a failure.
MLFLOW_VENV := .venv-mlflow
$(MLFLOW_VENV)/.installed: tests/servers/mlflow-requirements.txt
	$(call uv_install,$(MLFLOW_VENV),-r tests/servers/mlflow-requirements.txt)
	@touch $@

# NVIDIA's aiconfigurator, which the preview's Serving performance stage predicts memory and latency with, in a
# virtualenv of its own (its numpy/pandas/scipy stack would constrain the program's pins and weigh on `pulumi up`).
PERF_VENV := .venv-perf
$(PERF_VENV)/.installed: preview/performance-requirements.txt
	$(call uv_install,$(PERF_VENV),-r preview/performance-requirements.txt)
	@touch $@

# Then what aiconfigurator derives from the tables of each system the GPU catalog predicts on, whatever the request
# (the attention tables' lane densities: about 0.4 CPU-seconds a system), kept in the virtualenv for every preview's
# worker to read (preview/performance_worker.py warm). Without the file a worker derives them itself: the same figures.
PERF_WARM := $(PERF_VENV)/performance-warm.json
$(PERF_WARM): $(PERF_VENV)/.installed $(VENV)/.installed platform_config/gpu_catalog.py preview/performance_worker.py
	$(PY) -m preview.performance_prediction --warm

perf-venv: $(PERF_WARM)

real-servers: $(MLFLOW_VENV)/.installed
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v docker-registry >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing Debian's prometheus and docker-registry"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus docker-registry >/dev/null; \
		else echo "prometheus/promtool or docker-registry missing and not root: the Prometheus and image registry tests will skip" >&2; fi; }

# The upstream source releases the tests and the preview's upstream stage read (vLLM's, whose git
# repository is too large to mirror; the stage reads `vllm serve`'s flags from the pinned one), pinned
# by URL and sha256 in platform_config/pins.py: downloaded into build/upstream-sources/ when
# missing, and checked against the pinned hash on every run.
# Offline, a developer's suite still runs (those tests skip); CI (REQUIRE_REAL_SERVERS=1) stops here.
upstream-sources: $(VENV)/.installed
	@$(PY) -m tests.upstream_sources || { [ "$$REQUIRE_REAL_SERVERS" != 1 ] && \
		echo "upstream source releases missing: the tests that read them will skip" >&2; }

# Where PYTHONDONTWRITEBYTECODE is set (it is on the machines this project is built on) Python never caches
# the project's own modules and compiles them again in every process; compile them up front
# (quick when nothing changed; a stale cache is simply ignored).
BYTECODE_DIRS := components platform_config preview platform_tools benchmarks policies/inference_governance
BYTECODE_STAMP := build/.bytecode
bytecode: $(BYTECODE_STAMP)
$(BYTECODE_STAMP): $(VENV)/.installed $(shell find $(BYTECODE_DIRS) -name '*.py' 2>/dev/null)
	@$(PY) -m compileall -q $(BYTECODE_DIRS)
	@mkdir -p $(@D) && touch $@

crd-schemas:
	@test -d "$(CRD_SCHEMA_DIR)/serving.knative.dev" || { \
		git clone --quiet --filter=blob:none https://github.com/datreeio/CRDs-catalog "$(CRD_SCHEMA_DIR)" && \
		git -C "$(CRD_SCHEMA_DIR)" checkout --quiet $(CRD_CATALOG_REF); }

# PREVIOUS_STACK_FILE: the stack file as last deployed (CI: the default branch's), which the
# canary-weight-steps policy holds each model's canary weight to. REGISTRY_FILE: a recorded
# MLflow registry resolution to preview from instead of the registry (default: the lock file
# the stack names, registry.lockFile, which the preview reads itself).
PREVIOUS_STACK_FILE ?=
REGISTRY_FILE ?=
# BASELINE: another preview's output folder (CI: the default branch's) that the report's changes
# section compares this one with.
BASELINE ?=
# PREVIOUS_OUTPUTS: the deployed stack's outputs (`pulumi stack output --json`), whose securityPosture
# the guard rails compare this change with (default: BASELINE's).
PREVIOUS_OUTPUTS ?=
preview: $(VENV)/.installed $(POLICY_VENV)/.installed $(PERF_WARM) bytecode crd-schemas upstream-sources
	$(PY) -m preview --stack $(STACK) --out $(OUT) --policy-pack $(POLICY_PACK)$(if $(PREVIOUS_STACK_FILE), --previous-stack-file $(PREVIOUS_STACK_FILE))$(if $(REGISTRY_FILE), --registry-file $(REGISTRY_FILE))$(if $(BASELINE), --baseline $(BASELINE))$(if $(PREVIOUS_OUTPUTS), --previous-outputs $(PREVIOUS_OUTPUTS))$(if $(REPORT_ERRORS), --report-errors)

preview-all: $(VENV)/.installed $(POLICY_VENV)/.installed $(PERF_WARM) bytecode crd-schemas upstream-sources
	@for stack in dev staging prod; do $(PY) -m preview --stack $$stack --out build/preview/$$stack --quiet || exit 1; done

# The test files run side by side in pytest-xdist workers, one per CPU up to four (TEST_WORKERS=0:
# none). A file runs whole in one worker, so its module's servers and previews start once; the
# stacks' shared previews run once for all workers (tests/conftest.py).
TEST_WORKERS ?= auto
test: $(VENV)/.installed $(POLICY_VENV)/.installed $(PERF_WARM) bytecode crd-schemas real-servers upstream-sources
	$(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile

# The stack-config reference and the stack-file JSON schema, generated from the models.
docs: $(VENV)/.installed $(POLICY_VENV)/.installed
	$(PY) -m platform_config.reference
	$(PY) -m preview.policy_reference
	$(PY) -m platform_tools.architecture

# What the policy pack shares with the program, generated from the program's modules: the facts
# (policies/inference_governance/platform_facts.json) and the pack's copy of the canary release record
# (platform_config/release.py as policies/inference_governance/release_record.py); the suite fails when either is stale.
policy-facts: $(VENV)/.installed
	$(PY) -m components.policy_facts
release-record: policy-facts

# Record every stack's preview output as the expected one (tests/test_golden_outputs.py).
golden: preview-all
	@for stack in dev staging prod; do cp build/preview/$$stack/resources.json tests/golden/$$stack.resources.json; \
		$(PY) -c 'import sys; from tests.test_golden_outputs import stack_outputs; from pathlib import Path; \
			sys.stdout.write(stack_outputs(Path(sys.argv[1])))' build/preview/$$stack/report.json >tests/golden/$$stack.outputs.json || exit 1; done

# The canary tool against the suite's real Prometheus and series, on a copy of the prod stack
# (tests/canary_tryout.py); KEEP=1 leaves Prometheus running for commands by hand.
canary-try: $(VENV)/.installed real-servers
	$(PY) -m tests.canary_tryout$(if $(KEEP), --keep)

bench: $(VENV)/.installed $(POLICY_VENV)/.installed $(PERF_WARM) bytecode crd-schemas
	$(PY) benchmarks/bench_preview.py
	$(PY) benchmarks/bench_gateway.py
	$(PY) benchmarks/bench_filter.py

# The real path, for users with the Pulumi CLI, a backend and cloud credentials. As the deploy
# workflow does, the stack's last `canaryReleases` output becomes the pack's policy config
# (`previousReleases`), so the canary-weight-steps policy holds a hand-run change too; and the
# offline preview against those outputs gives the Serving performance stage's verdicts
# (pack-config.json), which the serving-performance policy holds every model server to.
POLICY_CONFIG := build/policy-config.$(STACK).json
pulumi-policy-config: $(VENV)/.installed $(POLICY_VENV)/.installed $(PERF_WARM) bytecode crd-schemas upstream-sources
	pulumi stack select $(STACK)
	@mkdir -p build
	pulumi stack output --json > build/stack-outputs.$(STACK).json
	$(PY) -m preview --stack $(STACK) --out build/preview/$(STACK) --policy-pack $(POLICY_PACK) --previous-outputs build/stack-outputs.$(STACK).json
	$(PY) -m preview.previous_releases --from-outputs build/stack-outputs.$(STACK).json --policy-config build/preview/$(STACK)/pack-config.json > $(POLICY_CONFIG)

pulumi-preview: $(VENV)/.installed $(POLICY_VENV)/.installed pulumi-policy-config
	pulumi preview --policy-pack policies --policy-pack-config $(POLICY_CONFIG)

pulumi-up: $(VENV)/.installed $(POLICY_VENV)/.installed pulumi-policy-config
	pulumi up --policy-pack policies --policy-pack-config $(POLICY_CONFIG)

clean:
	rm -rf build .pytest_cache
