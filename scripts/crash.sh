#!/usr/bin/env bash
# The crash tests of the persistent cache device at full length (docs/correctness.md):
#   - power loss simulated at 100,000 crash instants of each workload (the in-process harness,
#     crates/blockwell-server/tests/tier_crash.rs; the test command runs 600 of each);
#   - 1,000 kill -9 cycles of a real `blockwell serve` under a libnbd client (the test command runs 100).
# Run after scripts/test.sh has installed the tools. Takes about half an hour on the 2-core development machine.
# Usage: scripts/crash.sh [CRASH_POINTS] [KILL_CYCLES]
set -euo pipefail
cd "$(dirname "$0")/.."
POINTS=${1:-100000}
CYCLES=${2:-1000}
export CARGO_TERM_COLOR=never
echo "== power loss at $POINTS crash instants per workload"
BLOCKWELL_CRASH_POINTS=$POINTS cargo test --release --locked -p blockwell-server --test tier_crash -- --nocapture
echo "== $CYCLES kill -9 cycles"
BLOCKWELL_KILL_CYCLES=$CYCLES cargo test --release --locked -p blockwell-cli --test cli_cache_dev \
  kill9_cycles_lose_no_flushed_write -- --nocapture
