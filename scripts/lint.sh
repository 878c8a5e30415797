#!/usr/bin/env bash
# Format and lint gates of the workspace. A missing component is installed (rustup), and when it
# cannot be, the gate fails: a lint that did not run is not a lint that passed.
set -euo pipefail
for c in fmt clippy; do
  if ! cargo "$c" --version >/dev/null 2>&1; then
    comp=$([ "$c" = fmt ] && echo rustfmt || echo clippy)
    echo "lint: cargo $c is missing; rustup component add $comp"
    rustup component add "$comp" >/dev/null 2>&1 || true
    if ! cargo "$c" --version >/dev/null 2>&1; then
      echo "lint: FAILED: cargo $c is not installed and could not be (rustup component add $comp)" >&2
      exit 1
    fi
  fi
done
cargo fmt --all -- --check
echo "lint: cargo fmt --check ok"
cargo clippy --release --workspace --all-targets --locked -q -- -D warnings
echo "lint: cargo clippy -D warnings ok"
