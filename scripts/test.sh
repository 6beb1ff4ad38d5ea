#!/usr/bin/env bash
# The README's test command: installs what the tests need (idempotently) and runs the whole suite.
#   - Rust: rustfmt and clippy components (the toolchain itself comes with the machine).
#   - Python: libcachesim 0.3.5 (the peer for the miss-ratio cross-check) and numpy.
# Runs: cargo fmt --check, cargo clippy -D warnings, cargo test (unit, property, golden and CLI integration
# tests), then the libcachesim cross-check on generated traces.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }

step "installing test dependencies"
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("libcachesim") != "0.3.5")' 2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check --no-input "libcachesim==0.3.5"
fi
"$PY" -c 'import numpy' 2>/dev/null || "$PY" -m pip install --quiet --disable-pip-version-check --no-input numpy

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "cross-check against libcachesim"
cargo build --release --locked -p blockwell-cli
"$PY" scripts/crosscheck_libcachesim.py --bin target/release/blockwell
