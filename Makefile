# make demo: set up and run the simulated lab end to end. make test: set up and run every check.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SWIFT ?= $(shell command -v swift 2>/dev/null || echo /opt/swift/usr/bin/swift)
HARNESS := ios_harness

.PHONY: demo test lint typecheck pytest swift sshd bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orch validate configs/sim-lab.yaml configs/plans/sim-ab.yaml
	$(BIN)/orch run --fleet configs/sim-lab.yaml --plan configs/plans/sim-ab.yaml

test: lint typecheck swift pytest

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) sshd
	$(BIN)/pytest

# The SSH tests run against a real OpenSSH server on loopback: install Debian's when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
sshd:
	@test -x /usr/sbin/sshd || command -v sshd >/dev/null || \
	  ( $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server >/dev/null )

# The harness package builds and tests wherever Swift is; without Swift this step says so and skips.
swift:
	@if [ -f $(HARNESS)/Package.swift ]; then \
	  if [ -x "$(SWIFT)" ]; then cd $(HARNESS) && $(SWIFT) build -c release && $(SWIFT) test; \
	  else echo "swift not found: skipping the harness build"; fi; \
	fi

bench: $(STAMP)
	$(BIN)/python bench/bench_controller.py

clean:
	rm -rf $(VENV) $(HARNESS)/.build
