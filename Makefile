# Seckill: everything a newcomer runs. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

.DEFAULT_GOAL := help
.PHONY: help setup demo test lint format services clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed ## create .venv and install the project with its dev tools

services: ## start local Redis and MariaDB if they are not running
	@scripts/local_services.sh

demo: setup services ## a whole flash sale on this machine, with a report (ARGS="--users 5000 ...")
	$(BIN)/seckill-flash-sale $(ARGS)

test: setup services ## lint, then the test suite (real Redis, MariaDB, moto SQS server)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest $(ARGS)

format: setup ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .aws-sam
