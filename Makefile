# The two commands of the README: `make run` and `make test`. Both install what is missing first.
CARGO ?= cargo
BIN   := target/release/virtperf
DB    ?= virtperf.db

.PHONY: all deps deps-run build run test test-loaded test-jitter unit e2e lint bench fuzz clean

all: build

deps:
	@scripts/install-deps.sh

# What `make run` needs, no more (no browser, no libvirt: those are for the tests).
deps-run:
	@scripts/install-deps.sh run

build: deps
	$(CARGO) build --release --workspace --locked

# The default experiment: every environment this host can run, CPU, memory, system calls and the
# network, 3 launches each, precision ±5 % within 4m30s (examples/default.toml).
run: deps-run
	$(CARGO) build --release --workspace --locked
	$(BIN) doctor --quick
	$(BIN) run examples/default.toml --db $(DB) --html $(dir $(DB))report.html

# Unit tests, then end-to-end tests that really start agents and containers (a test whose
# requirement is missing, e.g. root for containers, prints `skipped: reason`); lint runs beside
# them at the lowest priority (scripts/test.sh), and both must pass.
test: build
	@scripts/test.sh

# The whole suite beside one CPU hog (stress-ng --cpu 1): a user's machine is often busy, and every
# test that measures the machine must pass there too (docs/testing.md, "Under load").
test-loaded: build
	@scripts/loaded.sh $(MAKE) --no-print-directory test

# The whole suite beside load that comes and goes (a CPU hog on and off at random, 0.2-2 s each):
# a test whose reference was measured at another moment than its figure fails here.
test-jitter: build
	@scripts/jitter.sh $(MAKE) --no-print-directory test

unit: deps
	$(CARGO) test --release --workspace --locked --lib --bins

e2e: build
	$(CARGO) test --release --locked -p virtperf --test e2e

lint:
	@scripts/lint.sh

# The fuzz targets (every test named fuzz_*: the protocol decoder, the experiment parser, the frame
# and datagram parsers, the agent's RFC 2544 detail) for FUZZ_SECS each; `make test` runs them 1 s each.
FUZZ_SECS ?= 60
fuzz: deps
	VIRTPERF_FUZZ_SECS=$(FUZZ_SECS) $(CARGO) test --release --workspace --locked fuzz_ -- --test-threads=1

bench: build
	bench/harness.sh
	bench/net.sh
	bench/rfc2544.sh
	bench/gbe.sh
	bench/start.sh
	bench/boot.sh
	bench/disk.sh
	bench/timer.sh
	bench/mechanisms.sh
	bench/libvirt.sh
	bench/remote.sh
	bench/precision.sh
	bench/ovs.sh

clean:
	$(CARGO) clean
