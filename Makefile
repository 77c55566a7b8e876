# Outbox bridge and event-stream projections. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BROKERS ?= 1
SECURE ?= 0
PYTEST_ARGS ?=
STAMP := $(VENV)/.installed
# SQL Server tests: Microsoft's ODBC driver from PyPI, registered with unixODBC in ODBC_DIR only.
MSSQL_ODBC_PACKAGE ?= mssql-python-odbc>=18.6,<19
ODBC_DIR := .run/odbc
TEST_NEEDS :=
ifneq ($(strip $(TEST_SQLSERVER_URL)),)
TEST_NEEDS += mssql-driver
export ODBCSYSINI := $(CURDIR)/$(ODBC_DIR)
endif

export SPARK_LOCAL_IP := 127.0.0.1

help: ## show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  Variables: BROKERS=1|3 (make up), PYTEST_ARGS=... (make test), TEST_SQLSERVER_URL=mssql+pyodbc://... (make test)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,dev,bench]'
	@touch $(STAMP)

venv: $(STAMP) ## create .venv and install the project with its pinned dependencies

sysdeps: ## install the Debian packages the tests use when missing (promtool/prometheus; PostgreSQL comes with `up`)
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; \
	  else echo "promtool is missing: sudo apt-get install prometheus" >&2; exit 1; fi; }

mssql-driver: $(STAMP) ## SQL Server tests: unixODBC (apt), pyodbc and Microsoft's ODBC Driver 18 (PyPI), registered in .run/odbc
	@ldconfig -p | grep -q 'libodbc\.so\.2 ' || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends unixodbc; \
	  else echo "unixODBC is missing: sudo apt-get install unixodbc" >&2; exit 1; fi; }
	$(PY) -m pip install -q -e '.[mssql]' '$(MSSQL_ODBC_PACKAGE)'
	$(PY) ops/mssql_odbc.py $(ODBC_DIR)

jars: $(STAMP) ## resolve the Kafka broker, Spark Kafka connector and Delta jars into .cache/jars
	$(PY) ops/localstack.py jars kafka spark

up: $(STAMP) ## start Kafka (BROKERS=1 or 3; SECURE=1: SASL_SSL, TLS, ACLs) and PostgreSQL on loopback; writes .run/stack.env
	$(PY) ops/localstack.py up --brokers $(BROKERS) $(if $(filter 1,$(SECURE)),--secure)

down: ## stop every process the local stack started
	@if [ -x $(PY) ]; then $(PY) ops/localstack.py down; else $(PYTHON) ops/localstack.py down; fi

status: $(STAMP) ## show which stack processes run
	$(PY) ops/localstack.py status

test: $(STAMP) jars sysdeps $(TEST_NEEDS) ## run the whole test suite (starts what it needs; SQL Server only with TEST_SQLSERVER_URL)
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP) ## run only the fast unit tests
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

lint: $(STAMP) ## ruff and mypy (strict on bridge/ and projections/)
	$(VENV)/bin/ruff check bridge projections tests ops bench migrations
	$(VENV)/bin/mypy bridge projections

demo: $(STAMP) jars ## run the end-to-end demo on embedded defaults
	$(PY) -m bridge.demo

bench: $(STAMP) jars ## run the benchmark suite; results go to docs/BENCHMARKS.md
	$(PY) -m bench.run

clean: down ## stop the stack and remove .run (keeps .venv and .cache)
	rm -rf .run

.PHONY: help venv sysdeps mssql-driver jars up down status test test-unit lint demo bench clean
