#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for a bounded time each, seeded with fuzz/seeds/<target>/ (valid
# handshakes and request headers). Installs cargo-fuzz if missing. The machine's stable toolchain is told to
# accept the nightly flags cargo-fuzz needs (RUSTC_BOOTSTRAP=1); a nightly toolchain works as well.
#   FUZZ_SECONDS   seconds per target (default 30)
#   FUZZ_TARGETS   space-separated targets (default: all in fuzz/fuzz_targets)
# Exits non-zero if a target crashes (the reproducer is left in fuzz/artifacts/<target>/) or fails to build.
# Last line: "fuzz: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export RUSTC_BOOTSTRAP=1
secs=${FUZZ_SECONDS:-30}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install --locked cargo-fuzz || { echo "fuzz: 0 passed, 1 failed (cargo-fuzz install)"; exit 1; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# cargo fuzz cannot be told --locked: a fuzz/Cargo.lock that no longer matches the crates it builds (a
# dependency added to blockwell-server) would be rewritten by the build and leave the checkout dirty. Check first.
if ! cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null 2>"$work/lock.err"; then
  cat "$work/lock.err"
  echo "fuzz/Cargo.lock is stale: run 'cargo metadata --format-version 1 --manifest-path fuzz/Cargo.toml' and commit it"
  echo "fuzz: 0 passed, 1 failed (stale fuzz/Cargo.lock)"
  exit 1
fi

targets=${FUZZ_TARGETS:-$(cd fuzz/fuzz_targets && ls -- *.rs | sed 's/\.rs$//')}
passed=0
failed=0
for t in $targets; do
  echo "== fuzz $t for ${secs}s"
  # New inputs go to a scratch corpus; the checked-in seeds are only read.
  mkdir -p "$work/$t"
  if cargo fuzz run "$t" "$work/$t" "fuzz/seeds/$t" -- -max_total_time="$secs" -print_final_stats=1 \
      >"$work/$t.log" 2>&1; then
    passed=$((passed + 1))
    grep -E '^(stat::number_of_executed_units|Done )' "$work/$t.log" | sed "s/^/  $t: /"
  else
    failed=$((failed + 1))
    tail -40 "$work/$t.log"
    echo "  $t: FAILED (see fuzz/artifacts/$t/)"
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
