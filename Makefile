# Seckill: everything a newcomer runs. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=
# The SAM CLI and cfn-lint live in a virtualenv of their own (requirements-sam.txt).
SAM_VENV := .venv-sam
SAM_BIN  := $(SAM_VENV)/bin
# checkov, the IaC security scan, in one more (its boto3 pin clashes with the SAM CLI's).
SCAN_VENV := .venv-checkov
SCAN_BIN  := $(SCAN_VENV)/bin
export SAM_CLI_TELEMETRY = 0
# SAM validates and builds offline; a region only names the endpoints it would use.
SAM_REGION ?= us-east-1

.DEFAULT_GOAL := help
.PHONY: help setup lock demo check test test-unit lint types format services browser clean sam-setup validate build openapi edge-function bench bench-setup sam-local

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# Every install is from a lock with hashes (X.txt, compiled from the short list X.in by
# `make lock`), by uv, which pip puts in .venv first from requirements-uv.txt.
UV := $(BIN)/uv
UV_INSTALL = $(UV) pip install --quiet --require-hashes
$(UV): requirements-uv.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-uv.txt
	touch $@

# Then the dev lock, and this checkout's distributions but the benchmarks' (requirements-own.txt),
# editable and without dependencies: the lock has them all, which pip check confirms.
DISTRIBUTIONS := pyproject.toml ops/pyproject.toml local/pyproject.toml demo/pyproject.toml
$(VENV)/.installed: $(UV) $(DISTRIBUTIONS) requirements-own.txt requirements-dev.txt
	$(UV_INSTALL) --python $(BIN)/python -r requirements-dev.txt
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -r requirements-own.txt
	$(UV) pip check --quiet --python $(BIN)/python || { echo "requirements-dev.txt lacks what a distribution needs: make lock" >&2; exit 1; }
	touch $@

setup: $(VENV)/.installed ## create .venv from the locks: the product, its tools (editable) and the dev tools

$(SAM_VENV)/.installed: $(UV) requirements-sam.txt
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SAM_VENV)
	$(UV_INSTALL) --python $(SAM_BIN)/python -r requirements-sam.txt
	touch $@

sam-setup: $(SAM_VENV)/.installed ## create .venv-sam with the SAM CLI and cfn-lint

$(SCAN_VENV)/.installed: $(UV) requirements-checkov.txt
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SCAN_VENV)
	$(UV_INSTALL) --python $(SCAN_BIN)/python -r requirements-checkov.txt
	touch $@

# The locks, each compiled from the X.in beside it by uv with every file's hash. What
# the Lambda runtime loads is resolved for its platform (CPython 3.12 on x86_64 Linux)
# whatever machine locks: the layer (less the AWS SDK the runtime brings, which it
# installs without), each function's requirements.in and sam-local's runtime stand-in.
# The dev tools' locks hold for any platform and Python 3.11 or later.
COMPILE      = $(UV) pip compile --quiet --generate-hashes --custom-compile-command "make lock" $(ARGS)
LAMBDA       := --python-platform x86_64-manylinux2014 --python-version 3.12
TOOLS        := --universal --python-version 3.11
RUNTIME_SDK  := boto3 botocore s3transfer jmespath urllib3 python-dateutil six
OWN          := seckill seckill-ops seckill-local seckill-demo seckill-bench
LAMBDA_LOCKS := $(patsubst %.in,%.txt,$(wildcard functions/*/requirements.in)) scripts/sam_local/standin/requirements.txt

lock: $(UV) ## compile every lock again from its .in (X.in -> X.txt, hashed); ARGS=--upgrade takes the newest releases
	$(COMPILE) $(TOOLS) requirements-uv.in -o requirements-uv.txt
	$(COMPILE) $(TOOLS) requirements-dev.in -o requirements-dev.txt $(addprefix --no-emit-package ,$(OWN))
	$(COMPILE) $(TOOLS) requirements-sam.in -o requirements-sam.txt
	$(COMPILE) $(TOOLS) requirements-checkov.in -o requirements-checkov.txt
	$(COMPILE) $(LAMBDA) layers/requirements.in -o layers/requirements.txt $(addprefix --no-emit-package ,$(RUNTIME_SDK))
	$(foreach lock,$(LAMBDA_LOCKS),$(COMPILE) $(LAMBDA) $(lock:.txt=.in) -o $(lock) &&) true

# The templates: template.yaml and the stacks it nests (network/template.yaml,
# data/template.yaml, and the edge, edge/template.yaml, which nests edge/waf.yaml).
# sam validate translates one template at a time; cfn-lint (the linter `sam validate
# --lint` runs, with the same region) and checkov each read them all in one process.
# checkov fails on any finding neither fixed nor skipped with a reason beside its resource.
TEMPLATES := template.yaml network/template.yaml data/template.yaml edge/template.yaml edge/waf.yaml
validate: sam-setup $(SCAN_VENV)/.installed ## the templates (template.yaml and its nested stacks): SAM's transform (sam validate), cfn-lint and checkov
	$(foreach t,$(TEMPLATES),$(SAM_BIN)/sam validate --region $(SAM_REGION) --config-env translate --template $(t) &&) true
	$(SAM_BIN)/cfn-lint --regions $(SAM_REGION) -- $(TEMPLATES)
	$(SCAN_BIN)/checkov --file $(TEMPLATES) --framework cloudformation --skip-download --compact --quiet

build: sam-setup ## sam build (cached, parallel, no container) into .aws-sam/build
	$(SAM_BIN)/sam build --region $(SAM_REGION)

services: ## start local Redis and MariaDB if they are not running
	@scripts/local_services.sh

browser: ## install Debian's Chromium and chromedriver if missing (the buyer's page's browser tests)
	@scripts/browser.sh

demo: bench-setup services ## a whole flash sale on this machine (Node.js for its edge), with a report (ARGS="--users 5000 ...")
	$(BIN)/seckill-flash-sale $(ARGS)

# Unit tests run with every service out of reach: they must need none.
CLOSED := REDIS_URL=redis://127.0.0.1:1/0 TEST_REDIS_URL=redis://127.0.0.1:1/0 DB_PORT=1 TEST_DB_PORT=1

# The unit tests on two workers: they share nothing (no service, each its own files).
UNIT := $(CLOSED) $(BIN)/pytest tests/unit -n 2

test-unit: bench-setup ## the unit tests alone (Node.js for the edge function's), with Redis and MySQL pointed at closed ports
	$(UNIT) $(ARGS)

lint: setup ## ruff's checks and format, changing nothing
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: setup ## mypy --strict over the layer, the operator commands and the handlers ([tool.mypy])
	$(BIN)/mypy

# The integration tests on two workers (pytest-xdist), each with its own database, Redis and moto server.
INTEGRATION := $(BIN)/pytest tests/integration -n 2

# The end-to-end tests on two workers: a whole run (a sale, the benchmarks) to whichever is
# free, the tests of any other file together on one (tests/e2e/conftest.py).
E2E := $(BIN)/pytest tests/e2e -n 2 --dist loadgroup

# The checks that read the code (templates, build, lint, types), two at a time, each
# one's output printed whole when it ends.
STATIC := $(MAKE) --no-print-directory -j2 --output-sync=target

check: bench-setup services ## the everyday loop: lint, types, unit and integration tests (no SAM; Node.js and the benchmarks package installed, as the tests need them)
	$(STATIC) lint types
	$(UNIT) $(ARGS)
	$(INTEGRATION) $(ARGS)

test: bench-setup services browser ## the full CI run: validate and build the SAM app, lint, types, then unit, integration and e2e tests
	$(STATIC) validate build lint types
	$(UNIT) $(ARGS)
	$(INTEGRATION) $(ARGS)
	$(E2E) $(ARGS)

# The benchmarks' SQS stand-in: fauxqs and Node.js 22, pinned, from the npm registry.
FAUXQS := benchmarks/fauxqs
$(FAUXQS)/node_modules/.package-lock.json: $(FAUXQS)/package-lock.json
	npm ci --prefix $(FAUXQS) --no-audit --no-fund --loglevel=error

$(VENV)/.bench-installed: $(VENV)/.installed benchmarks/pyproject.toml
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e ./benchmarks
	touch $@

bench-setup: setup $(VENV)/.bench-installed $(FAUXQS)/node_modules/.package-lock.json ## install the benchmarks (editable) and their SQS stand-in (fauxqs on Node.js 22)

openapi: setup ## regenerate docs/openapi.json from the HTTP routes (CI checks it is current)
	$(BIN)/seckill-openapi

edge-function: setup ## copy edge/press.js into edge/template.yaml's EdgePressFunction (a unit test checks they are equal)
	$(BIN)/seckill-edge-function

bench: bench-setup services ## the benchmarks side by side: JSON, PNG plots and tables in benchmarks/results (ARGS="--quick", "--help")
	$(BIN)/python -m benchmarks $(ARGS)

# Linux; as root it installs and starts what is missing (docker.io, dockerd, socat, debootstrap).
sam-local: setup sam-setup services ## the real SAM CLI on Docker: sam build, sam local invoke of every function, start-api, all checked
	$(BIN)/python -m scripts.sam_local --sam $(SAM_BIN)/sam $(ARGS)

format: setup ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) $(SAM_VENV) $(SCAN_VENV) $(FAUXQS)/node_modules .pytest_cache .ruff_cache .mypy_cache .aws-sam .hypothesis
