#!/usr/bin/env bash
# The HTTP body fuzzer (crates/server/src/routes/body_fuzz_tests.rs) for
# a longer run than the test suite's: CASES generated requests over every
# route of the table, against the real router over a ModelBroker and a
# LocalBroker. Fails on a 5xx, a panic, or an error body that is not
# api.md's `{"error": {"code", "message"}}` with a documented code; the
# failing request is printed (shrunk).
#
# Usage: scripts/fuzz-http.sh [CASES]   (default 20000; the recorded run
#        of 5,000 took 65 s on a busy machine, docs/robustness.md;
#        PROPTEST_RNG_SEED varies the run)
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-${CASES:-20000}}"
start=$(date +%s)
PROPTEST_CASES="$cases" cargo test --quiet -p delayd-server --lib -- \
  body_fuzz_tests --test-threads=1
echo "fuzz-http: $cases cases in $(($(date +%s) - start))s (build included)"
