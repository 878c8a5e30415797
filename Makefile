# The two commands of the README: `make run` and `make test`. Both install what is missing first.
CARGO ?= cargo
BIN   := target/release/virtperf
DB    ?= virtperf.db

.PHONY: all deps build run test unit e2e lint bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --locked

# The default experiment: every environment this build has, CPU/memory/syscall workloads.
run: build
	$(BIN) doctor --quick
	$(BIN) run examples/default.toml --db $(DB)

# Unit tests, then end-to-end tests that really start agents and containers (a test whose
# requirement is missing, e.g. root for containers, prints `skipped: reason`), then lint.
test: build
	$(CARGO) test --release --workspace --locked
	@scripts/lint.sh

unit: deps
	$(CARGO) test --release --workspace --locked --lib --bins

e2e: build
	$(CARGO) test --release --locked -p virtperf --test e2e

lint:
	@scripts/lint.sh

bench: build
	bench/harness.sh
	bench/net.sh
	bench/rfc2544.sh
	bench/start.sh
	bench/boot.sh

clean:
	$(CARGO) clean
