#!/usr/bin/env bash
# The README's test command: installs what the tests need (idempotently) and runs the whole suite.
#   - Debian: qemu-utils, libnbd-bin, python3-libnbd (nbdsh), nbdkit, fio (real NBD clients for the server tests), fuse3 and
#     xfsprogs (the FUSE export with ext4/xfs on top), openssl (TLS test certificates), systemd
#     (systemd-socket-activate) and util-linux (setpriv, prlimit).
#   - Rust: rustfmt and clippy components (the toolchain itself comes with the machine).
#   - Python: libcachesim 0.3.5 (the peer for the miss-ratio cross-check) and numpy; maturin, and a venv in
#     target/pyenv with pandas, pytest, pyarrow and dask[distributed], for the blockwell Python package.
# Runs: cargo fmt --check, cargo clippy -D warnings, cargo doc -D warnings, cargo test (unit, property, golden and CLI integration
# tests), the libcachesim cross-check on generated traces, the Python package's pytest suite, then the cargo-fuzz targets of the NBD negotiation
# and request parsers for FUZZ_SECONDS (default 20) each (scripts/fuzz.sh installs cargo-fuzz if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# Each step's header says how long the suite has run so far, so that a slow step shows in the CI log.
step() { printf '\n== %s  [%dm%02ds]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "installing test dependencies"
# Real NBD clients for the server tests: qemu-io/qemu-img (qemu-utils), nbdinfo/nbdcopy (libnbd-bin), nbdkit and fio.
need_apt=()
command -v qemu-io >/dev/null 2>&1 || need_apt+=(qemu-utils)
command -v nbdinfo >/dev/null 2>&1 && command -v nbdcopy >/dev/null 2>&1 || need_apt+=(libnbd-bin)
command -v nbdkit >/dev/null 2>&1 || need_apt+=(nbdkit)
command -v fio >/dev/null 2>&1 || need_apt+=(fio)
# nbdsh (libnbd's Python binding, for the Debian python3) drives the sim-vs-serve differential test.
{ command -v nbdsh >/dev/null 2>&1 && /usr/bin/python3 -c 'import nbd' 2>/dev/null; } || need_apt+=(python3-libnbd)
# FUSE mounting for `blockwell mount` (fusermount3) and xfs for its filesystem test.
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v mkfs.xfs >/dev/null 2>&1 || need_apt+=(xfsprogs)
# TLS tests make their certificates with openssl; the service test activates the server with
# systemd-socket-activate; the thread-limit test runs it under setpriv and prlimit.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v systemd-socket-activate >/dev/null 2>&1 || need_apt+=(systemd)
{ command -v setpriv >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1; } || need_apt+=(util-linux)
if ((${#need_apt[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
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

step "cargo doc (broken or private links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "cargo test"
cargo test --workspace --locked

step "cross-check against libcachesim"
cargo build --release --locked -p blockwell-cli
"$PY" scripts/crosscheck_libcachesim.py --bin target/release/blockwell

step "python package (crates/blockwell-py): wheel, venv, pytest"
# The abi3 wheel goes into a venv under target/ (system site-packages visible, for numpy and libcachesim);
# pandas, pytest, pyarrow (sweep results as Parquet) and dask.distributed (sweeps on a LocalCluster) are
# installed there when the system lacks them.
command -v maturin >/dev/null 2>&1 || "$PY" -m pip install --quiet --disable-pip-version-check --no-input "maturin>=1.5,<2"
VENV=target/pyenv
[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
for pair in pandas:pandas pytest:pytest pyarrow:pyarrow distributed:dask[distributed] matplotlib:matplotlib; do
  mod=${pair%%:*} pkg=${pair#*:}
  "$VENV/bin/python" -c "import $mod" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$pkg"
done
rm -rf target/wheels
maturin build --release --locked --quiet -m crates/blockwell-py/Cargo.toml -o target/wheels
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --force-reinstall --no-deps target/wheels/blockwell-*.whl
BLOCKWELL_BIN=target/release/blockwell "$VENV/bin/python" -m pytest -q -p no:cacheprovider crates/blockwell-py/tests

step "fuzz the NBD parsers (bounded)"
FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh

step "done"
