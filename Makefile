# make demo: set up and run the simulated lab end to end. make test: set up and run every check.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_VERSION := $(shell sed -n 's/^pip==//p' constraints.txt)
SWIFT ?= $(shell command -v swift 2>/dev/null || echo /opt/swift/usr/bin/swift)
HARNESS := ios_harness

.PHONY: demo demo-host demo-sim demo-twin demo-site runtimes test lint typecheck pytest swift sshd chromium bench bench-runtimes clean lock

# constraints.txt pins every package the venv holds (pyproject.toml gives only ranges): every fresh
# machine gets the same versions. Refresh it on purpose: make lock.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip==$(PIP_VERSION)'
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

# The demo: the harness's raw loop against llama.cpp and ONNX Runtime GenAI on this machine's CPU
# (same locally made model, settled, fresh, interleaved; verdicts, token gates, audit), then the
# simulated phone lab. The first run installs the runtimes (~4 min on 2 cores: llama.cpp builds
# from source) and makes the model (8 min in all on a fresh machine); later runs reuse both (~3-4 min).
RUNTIMES_CLI := $(BIN)/orch runtimes
DEMO_RUNTIMES := llamacpp ort-genai
M110 := $(HOME)/.cache/orch/models/llama-m110-s0/model-Q8_0.gguf
DEMO_RESULTS := results

demo: demo-host demo-sim demo-twin demo-site

# The demo ends with the site of everything under results/ (every run's report; the nightly history
# when there is one): it prints the file:// address to open.
demo-site: $(STAMP)
	$(BIN)/orch publish --results $(DEMO_RESULTS) --out $(DEMO_RESULTS)/site

# LiteRT-LM joins the demo where it is installed (orch runtimes install litert-lm: ~3.7 GB).
DEMO_PLAN = configs/plans/$(if $(wildcard $(or $(ORCH_CACHE),$(HOME)/.cache/orch)/runtimes/litert-lm/installed.json),demo-host-litert,demo-host).yaml

demo-host: $(STAMP) runtimes
	@test -f $(M110) || $(BIN)/orch model make --size m110
	$(BIN)/orch validate configs/demo-fleet.yaml $(DEMO_PLAN)
	$(RUNTIMES_CLI) prepare $(DEMO_PLAN)
	$(BIN)/orch run --fleet configs/demo-fleet.yaml --plan $(DEMO_PLAN) --results $(DEMO_RESULTS)
	@run=$$(ls -d $(DEMO_RESULTS)/*-demo-host-* | sort | tail -1); $(BIN)/orch audit $$(basename $$run) --results $(DEMO_RESULTS)

demo-sim: $(STAMP)
	$(BIN)/orch validate configs/demo-fleet.yaml configs/plans/demo-sim.yaml
	$(BIN)/orch run --fleet configs/demo-fleet.yaml --plan configs/plans/demo-sim.yaml --results $(DEMO_RESULTS)

# The iPhone path on a phone twin (an emulated iPhone, not a phone: docs/twin.md): install, model
# push, launch, pull and a verdict through pymobiledevice3. The twin lives as long as the run, in a
# temporary directory, on free loopback ports (~30 s). Needs the harness build (demo-host makes it).
TWIN_IPA := $(HARNESS)/.build/twin.ipa
demo-twin: $(STAMP)
	@if [ ! -x $(HARNESS)/.build/release/harness ]; then \
	  if [ -x "$(SWIFT)" ]; then (cd $(HARNESS) && $(SWIFT) build -c release) || exit 1; \
	  else echo "swift not found: skipping the phone twin demo"; exit 0; fi; fi; \
	$(BIN)/orch twin make-ipa $(HARNESS)/.build/release/harness --out $(TWIN_IPA) --minimum-os 18.0 >/dev/null && \
	$(BIN)/orch validate configs/demo-fleet.yaml configs/plans/demo-twin.yaml && \
	echo "phone twin (an emulated iPhone running this machine's harness, not a phone):" && \
	$(BIN)/orch twin serve --ephemeral --ios 18.2 -- \
	  $(BIN)/orch run --fleet configs/demo-fleet.yaml --plan configs/plans/demo-twin.yaml --results $(DEMO_RESULTS)

# Competitor runtimes, each in its own environment under ~/.cache/orch/runtimes (skipped when there).
runtimes: $(STAMP)
	$(RUNTIMES_CLI) install $(DEMO_RUNTIMES)

# CI (CI=true) installs the runtimes first so their integration tests run; elsewhere they run where installed.
TEST_RUNTIMES := $(if $(CI),runtimes)

test: lint typecheck swift pytest

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) sshd chromium $(TEST_RUNTIMES)
	$(BIN)/pytest

# The SSH tests run against a real OpenSSH server on loopback: install Debian's when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
sshd:
	@test -x /usr/sbin/sshd || command -v sshd >/dev/null || \
	  ( $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server >/dev/null )

# The published site's tests open it in a real browser: install Debian's headless Chromium when missing.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || test -x /usr/bin/chromium || \
	  ( $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null )

# The harness package builds and tests wherever Swift is; without Swift this step says so and skips.
swift:
	@if [ -f $(HARNESS)/Package.swift ]; then \
	  if [ -x "$(SWIFT)" ]; then cd $(HARNESS) && $(SWIFT) build -c release && $(SWIFT) test && bash Tools/metal-typecheck.sh; \
	  else echo "swift not found: skipping the harness build"; fi; \
	fi

bench: $(STAMP)
	$(BIN)/python bench/bench_controller.py

bench-runtimes: $(STAMP) runtimes
	$(BIN)/python bench/bench_runtimes.py

# Re-resolve the newest versions pyproject.toml allows, in a scratch venv, and pin them.
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -e '.[test]'
	( echo '# Every package make installs into .venv, pinned (make lock refreshes it from pyproject.toml ranges).'; \
	  ( .lock-venv/bin/python -m pip freeze --exclude-editable | grep -v '^-e'; \
	    echo "pip==$$(.lock-venv/bin/python -m pip --version | cut -d' ' -f2)" ) | sort -f ) > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) $(HARNESS)/.build
