# One entry point for set-up, the demo, checks, tests and benchmarks. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-core
# every package pinned (pip install -c): an install next month resolves to the same code
PIP_INSTALL := $(PY) -m pip install -q -c constraints.txt

.PHONY: help setup run test test-unit test-external test-upgrade check bench lab chaos clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-10s %s\n",$$1,$$2}'

# after the system check, which says what is missing (python3-venv, ...) before anything fails
VENV_NEW := test -x $(PY) || { python3 -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip; }

$(STAMP): pyproject.toml constraints.txt native/ed25519/Cargo.toml native/ed25519/src/lib.rs
	bash scripts/install-system-deps.sh all
	$(VENV_NEW)
	$(PIP_INSTALL) -e '.[dev]'
	bash scripts/build-native.sh $(PY)
	$(PY) -c 'from pipeline.kafka.local import resolve_classpath; print("kafka jars:", resolve_classpath().lib_dir)'
	bash scripts/build-otelcol.sh $(VENV)/bin/fleet-otelcol
	touch $(STAMP) $(RUN_STAMP)

setup: $(STAMP)  ## install everything for the checks and the suite (system packages, venv, Kafka jars)

# the demo needs the core install only, and no root: java and maven when no KAFKA_BOOTSTRAP
$(RUN_STAMP): pyproject.toml constraints.txt
	bash scripts/install-system-deps.sh run
	$(VENV_NEW)
	$(PIP_INSTALL) -e .
	bash scripts/build-native.sh $(PY)
	touch $(RUN_STAMP)

run: $(RUN_STAMP)  ## the main job on embedded defaults: local Kafka (or KAFKA_BOOTSTRAP) + SQLite, two gateways, a live demo
	$(VENV)/bin/fleet demo

# Two pytest workers (pytest-xdist): most integration tests wait on a broker, a timeout or a
# child process, so two at a time cut the wall time by a third or more on two cores. A file's
# tests stay on one worker, in order (`loadfile`): the secured modules' last test scans what the
# module's earlier tests logged. Each worker starts its own brokers (folders claimed by flock,
# free ports); names are unique per test, so tests never see each other's topics or groups.
TEST_WORKERS ?= 2
test: setup  ## every test, against a real Kafka broker it starts itself (and PostgreSQL)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# A secured three-node cluster started apart (SASL_PLAINTEXT SCRAM-SHA-512, min ISR 2, RF 3), given
# to the suite as someone else's: KAFKA_BOOTSTRAP + KAFKA_COMMAND_CONFIG only; stopped at the end.
test-external: setup  ## the suite against a secured three-node cluster it did not start (docs/local-kafka.md)
	$(PY) scripts/test_external.py -n $(TEST_WORKERS) --dist loadfile

test-unit: setup  ## only tests that need no broker
	FLEET_SKIP_KAFKA=1 $(PY) -m pytest tests/unit

# the previous release is installed from its git tag: here a missing tag fails (`make test` skips)
test-upgrade: setup  ## only the rolling upgrades from the previous release's tag (part of `make test` too)
	FLEET_REQUIRE_PREVIOUS=1 $(PY) -m pytest tests/integration/test_rolling_upgrade.py -m upgrade

lab: setup  ## every shipped lab scenario (examples/lab/) on a real broker, model beside measurement
	FLEET_LAB_SCENARIOS=1 $(PY) -m pytest tests/integration/test_lab_run.py -m lab_scenarios -s

CHAOS_REPEAT ?= 20
CHAOS_SEED ?= 0
chaos: setup  ## the chaos catalogue (docs/chaos.md): every scenario, CHAOS_REPEAT seeded repetitions
	$(PY) -m pipeline chaos run --scenario all --repeat $(CHAOS_REPEAT) --seed $(CHAOS_SEED)

check: setup  ## ruff + mypy (strict on pipeline/)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check pipeline
	$(PY) -m mypy

bench: setup  ## benchmarks; ratios against a baseline measured in the same run
	$(PY) -m bench

clean:  ## remove the virtualenv
	rm -rf $(VENV)
