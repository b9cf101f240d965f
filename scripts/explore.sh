#!/usr/bin/env bash
# The local store's seeded fault explorer for a long run
# (crates/local/tests/local/fault_explorer.rs): random broker calls against a
# LocalBroker whose fault seam fails a write, an fsync and a read after
# random countdowns, a crash (drop without shutdown), `check`, a reopen and
# a comparison with what was acknowledged. Seeds run in order from
# DELAYD_EXPLORER_FIRST_SEED (default: from the clock, so that each run
# explores new seeds); a failing seed is printed with its calls and
# reproduces with
#   DELAYD_EXPLORER_SEED=<n> cargo test -p delayd-local --features fault-injection --test local fault_explorer::
#
# Usage: scripts/explore.sh [SECONDS]   (default 3600; a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-${DELAYD_EXPLORER_SECONDS:-3600}}"
first="${DELAYD_EXPLORER_FIRST_SEED:-$(date +%s)000}"
echo "fault explorer: ${seconds} s from seed ${first}"
DELAYD_EXPLORER_SECONDS="$seconds" \
DELAYD_EXPLORER_FIRST_SEED="$first" \
DELAYD_EXPLORER_CASES="${DELAYD_EXPLORER_CASES:-100000000}" \
  cargo test --release -p delayd-local --features fault-injection \
  --test local fault_explorer::explore_a_fixed_number_of_seeds -- --nocapture 2>&1 |
  grep -v '^fault explorer: seed [0-9]*$'
