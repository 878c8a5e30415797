#!/usr/bin/env bash
# Format and lint gates of the workspace; a missing component is reported, not silently passed.
set -euo pipefail
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
  echo "lint: cargo fmt --check ok"
else
  echo "lint: skipped cargo fmt (rustfmt component not installed)"
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --workspace --all-targets --locked -q -- -D warnings
  echo "lint: cargo clippy -D warnings ok"
else
  echo "lint: skipped cargo clippy (clippy component not installed)"
fi
