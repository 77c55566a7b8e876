# Outbox bridge and event-stream projections. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BROKERS ?= 1
SECURE ?= 0
SPARK ?=
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

# The artefacts `make test` checks besides the tree: the sdist and the wheel (its core compiled with mypyc), and the
# Helm chart rendered by a pinned helm, built once per machine from the Go module proxy into .cache.
DIST := .run/dist
WHEEL_STAMP := $(DIST)/.built
PACKAGED := pyproject.toml setup.py MANIFEST.in README.md $(shell find bridge projections migrations ops/packaging \
  -name '*.py' -o -name '*.ini' -o -name '*.mako' -o -name '*.properties' 2>/dev/null)
HELM_VERSION := v3.22.0
HELM := .cache/helm/$(HELM_VERSION)/helm

help: ## show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  Variables: BROKERS=1|3 and SPARK=standalone (make up), PYTEST_ARGS=... (make test), TEST_SQLSERVER_URL=mssql+pyodbc://... (make test)"

# pip's full output is a few hundred lines; show one line per package it fetches, then how many it installs.
PIP_PROGRESS := awk '/^Collecting /{n++; printf "  %3d %s\n", n, $$2; fflush()} \
  /^Installing collected packages: /{k = split(substr($$0, 32), names, ", "); printf "  installing %d package%s ...\n", k, k == 1 ? "" : "s"; fflush()} \
  /^Successfully installed /{printf "  installed %d package%s\n", NF - 2, NF == 3 ? "" : "s"; fflush()}'

$(STAMP): pyproject.toml
	@test -x $(PY) || { echo "creating the virtualenv $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "upgrading pip in $(VENV)"
	@$(PY) -m pip install -q --upgrade pip
	@echo "installing outbox-bridge (editable) and its pinned dependencies into $(VENV), extras spark, dev, bench:"
	@echo "PySpark and delta-spark (the largest, a few hundred MB), confluent-kafka, SQLAlchemy, pytest, ruff, mypy, ..."
	@set -o pipefail; $(PY) -m pip install --progress-bar off -e '.[spark,dev,bench]' | $(PIP_PROGRESS)
	@touch $(STAMP)

venv: $(STAMP) ## create .venv and install the project with its pinned dependencies

sysdeps: ## install Prometheus (its service left off) and a C compiler from Debian's packages when missing; check for Go (helm)
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then \
	  echo "Prometheus for the alert-rule and scrape tests: promtool and prometheus are installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "Prometheus for the alert-rule and scrape tests: installing Debian's prometheus package (apt-get)," \
	    "without starting its service or enabling it at boot"; \
	  ops/apt-install.sh prometheus; \
	else \
	  echo "promtool and prometheus are missing: run \`sudo ops/apt-install.sh prometheus\` (Debian's" \
	    "package, its service left off) or \`sudo apt-get install prometheus\`" >&2; exit 1; \
	fi
	@if command -v cc >/dev/null; then \
	  echo "a C compiler for mypyc (the wheel's compiled core): $$(command -v cc)"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "a C compiler for mypyc (the wheel's compiled core): installing Debian's gcc package (apt-get)"; \
	  ops/apt-install.sh gcc; \
	else \
	  echo "no C compiler for mypyc: run \`sudo apt-get install gcc\`" >&2; exit 1; \
	fi
	@if [ -x $(HELM) ]; then \
	  echo "helm $(HELM_VERSION) for the chart tests: $(HELM)"; \
	elif command -v go >/dev/null; then \
	  echo "helm $(HELM_VERSION) for the chart tests: built from the Go module proxy with $$(go version | cut -d' ' -f3) into $(HELM) (once)"; \
	else \
	  echo "no Go toolchain to build helm $(HELM_VERSION) for the chart tests: install Go (https://go.dev/dl/)," \
	    "or put helm $(HELM_VERSION) at $(HELM)" >&2; exit 1; \
	fi

mssql-driver: $(STAMP) ## SQL Server tests: unixODBC (apt), pyodbc and Microsoft's ODBC Driver 18 (PyPI), registered in .run/odbc
	@ldconfig -p | grep -q 'libodbc\.so\.2 ' || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends unixodbc; \
	  else echo "unixODBC is missing: sudo apt-get install unixodbc" >&2; exit 1; fi; }
	$(PY) -m pip install -q -e '.[mssql]' '$(MSSQL_ODBC_PACKAGE)'
	$(PY) ops/mssql_odbc.py $(ODBC_DIR)

$(WHEEL_STAMP): $(STAMP) $(PACKAGED)
	@echo "building the sdist and, from it, the wheel with the compiled core into $(DIST) (python -m build)"
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@OUTBOX_COMPILE_CORE=1 $(PY) -m build --outdir $(DIST) . > $(DIST)/build.log 2>&1 \
	  || { tail -40 $(DIST)/build.log; echo "the build failed; its whole log: $(DIST)/build.log" >&2; exit 1; }
	@ls $(DIST) | grep -v build.log | sed 's/^/  /'
	@touch $(WHEEL_STAMP)

wheel: $(WHEEL_STAMP) ## build the sdist and the wheel (per-event core compiled with mypyc) into .run/dist

$(HELM):
	@echo "building helm $(HELM_VERSION) from the Go module proxy into $(dir $(HELM))"
	GOBIN=$(CURDIR)/$(dir $(HELM)) CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm: $(HELM) ## build the pinned helm (chart tests) into .cache/helm, once per machine

demo-jars: $(STAMP) ## resolve the jars the demo runs on into .cache/jars: the Kafka broker, Spark's Kafka connector, Delta
	$(PY) ops/localstack.py jars kafka spark

# Kafka Connect and Debezium (about 42 MB) only for the record-format test and the benchmark: not for the demo.
jars: demo-jars ## resolve those and the Kafka Connect and Debezium jars into .cache/jars
	$(PY) ops/connect.py jars

up: $(STAMP) ## start Kafka (BROKERS=1 or 3; SECURE=1: SASL_SSL, TLS, ACLs) and PostgreSQL on loopback; writes .run/stack.env (SPARK=standalone: a Spark cluster too)
	$(PY) ops/localstack.py up --brokers $(BROKERS) $(if $(filter 1,$(SECURE)),--secure)
	@if [ "$(SPARK)" = standalone ]; then $(PY) ops/sparkcluster.py up; \
	elif [ -n "$(SPARK)" ]; then echo "SPARK=$(SPARK) is not known; use SPARK=standalone (a master and two workers on 127.0.0.1)" >&2; exit 2; fi

down: ## stop every process the local stack started (and the Spark cluster of SPARK=standalone)
	@if [ -x $(PY) ]; then $(PY) ops/sparkcluster.py down; $(PY) ops/localstack.py down; else $(PYTHON) ops/localstack.py down; fi

status: $(STAMP) ## show which stack processes run
	$(PY) ops/localstack.py status

registry-up: $(STAMP) ## start a schema registry (Apicurio, Confluent's API; in memory) for BRIDGE_VALUE_FORMAT=json-schema
	$(PY) ops/localstack.py registry-up

registry-down: ## stop the schema registry (`make down` stops it too)
	@if [ -x $(PY) ]; then $(PY) ops/localstack.py registry-down; else $(PYTHON) ops/localstack.py registry-down; fi

# sysdeps first, so the run says what it installs before it starts. -v: one line per test, so a long file shows
# progress; the slowest tests are listed at the end (--durations in pyproject.toml).
# The wheel and helm come first: the tests install the one (tests/integration/ops/test_wheel.py) and render the chart
# with the other (test_helm_chart.py).
# TEST_WORKERS pytest-xdist workers run the suite side by side: most integration tests wait on Kafka, PostgreSQL
# and Spark more than they compute. Tests that hold something exclusive (the clusters on fixed
# ports) stay on one worker each (tests/conftest.py, EXCLUSIVE_GROUPS); TEST_WORKERS=0 runs them one by one.
# Two, on two cores: with three the run is CPU-bound throughout (vmstat: no idle time), each test took 1.7 times as
# long, and the suite 45.5 minutes against 39.5.
TEST_WORKERS ?= 2
test: sysdeps $(STAMP) jars $(WHEEL_STAMP) $(HELM) $(TEST_NEEDS) ## run the whole test suite (starts what it needs; SQL Server only with TEST_SQLSERVER_URL)
	$(PY) ops/localstack.py up --no-spark-jars
	OUTBOX_TEST_DIST=$(CURDIR)/$(DIST) OUTBOX_HELM=$(CURDIR)/$(HELM) $(PY) -m pytest -v \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-compiled

test-compiled: $(STAMP) $(WHEEL_STAMP) ## the unit tests again, on a copy with the wheel's compiled core (.run/compiled)
	$(PY) ops/compile_core.py .run/compiled --wheel "$$(ls $(DIST)/*.whl)"
	cd .run/compiled && BRIDGE_EXPECT_COMPILED=1 $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider -n auto tests/unit

test-unit: $(STAMP) ## run only the fast unit tests, on every core
	$(PY) -m pytest -n auto tests/unit $(PYTEST_ARGS)

lint: $(STAMP) ## ruff and mypy (strict on bridge/ and projections/)
	$(VENV)/bin/ruff check bridge projections tests ops bench migrations setup.py
	$(VENV)/bin/mypy bridge projections

demo: $(STAMP) demo-jars ## run the end-to-end demo on embedded defaults (starts Kafka and leaves it running: `make down`)
	$(PY) -m bridge.demo

bench: $(STAMP) jars ## run the benchmark suite on the bridge installed from the wheel; results go to docs/BENCHMARKS.md
	$(PY) -m bench.run

clean: down ## stop the stack and remove .run (keeps .venv and .cache)
	rm -rf .run

.PHONY: help venv sysdeps mssql-driver wheel helm demo-jars jars up down status registry-up registry-down test test-compiled test-unit lint demo bench clean
