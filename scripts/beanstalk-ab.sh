#!/usr/bin/env bash
# Two delayd builds against each other over the beanstalkd protocol,
# alternating, a fresh `delayd serve --durability $DURABILITY` per run, with
# the load client of beanstalk-bench.sh (crates/beanstalk/examples/compare.rs:
# 4 producers putting pipelined batches of 64, 4 consumers with 8 reserves in
# flight, 100-byte jobs, delays 1-3 s). Modes: `paced` (--rate $RATE), `max`
# (as fast as the client goes), `drain` (every job due within the second
# after $DUE_IN s). Each run prints the client's rates and lateness, the
# server's CPU per job and per commit (/proc/PID/stat over the run,
# delayd_commits_total from /metrics), and, for B in the first round, the
# server's lateness by stage (delayd_delivery_lateness_seconds).
#
# Usage: scripts/beanstalk-ab.sh BIN_A BIN_B
# Env: ROUNDS (2), MODES ("paced max drain"), JOBS (200000), RATE (20000),
#      DUE_IN (8), DURABILITY (always), COMPARE_BIN (default
#      $CARGO_TARGET_DIR/release/examples/compare, built).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ "$#" -eq 2 ] || { echo "usage: scripts/beanstalk-ab.sh BIN_A BIN_B" >&2; exit 2; }
bins=("$1" "$2")
rounds=${ROUNDS:-2}
modes=${MODES:-paced max drain}
jobs=${JOBS:-200000}
rate=${RATE:-20000}
due_in=${DUE_IN:-8}
durability=${DURABILITY:-always}
if [ -z "${COMPARE_BIN:-}" ]; then
  cargo build --release -q -p delayd-beanstalk --example compare
  COMPARE_BIN=${CARGO_TARGET_DIR:-target}/release/examples/compare
fi
hz=$(getconf CLK_TCK)
pid=""
work=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  if [ -n "$work" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

echo "jobs=$jobs rate=$rate durability=$durability load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
for round in $(seq "$rounds"); do
  for mode in $modes; do
    for side in A B; do
      bin=${bins[0]}
      [ "$side" = B ] && bin=${bins[1]}
      work=$(mktemp -d)
      port=$(free_port)
      metrics=$(free_port)
      RUST_LOG=warn "$bin" serve --http "127.0.0.1:$metrics" --beanstalk "127.0.0.1:$port" \
        --data "$work/data" --durability "$durability" &
      pid=$!
      wait_healthy "$metrics" "$pid"
      extra=()
      case $mode in
        paced) extra=(--rate "$rate") ;;
        drain) extra=(--due-in "$due_in") ;;
      esac
      cpu_before=$(cpu_ticks "$pid")
      commits_before=$(commits_total "$metrics")
      line=$("$COMPARE_BIN" "127.0.0.1:$port" --jobs "$jobs" --producers 4 --consumers 4 \
        --pipeline 64 --reserves 8 --delay-min 1 --delay-max 3 --seconds 60 \
        --label "$side" "${extra[@]}")
      cpu=$(($(cpu_ticks "$pid") - cpu_before))
      commits=$(($(commits_total "$metrics") - ${commits_before:-0}))
      fields=$(echo "$line" | grep -o "puts_per_s=[0-9]*\|deliveries_per_s=[0-9]*\|late_p50_ms=[0-9.]*\|late_p99_ms=[0-9.]*\|drain_per_s=[0-9]*\|lost=[0-9]*\|dup=[0-9]*\|early=[0-9]*" | tr '\n' ' ')
      echo "round=$round mode=$mode side=$side $fields cpu_us_per_job=$((cpu * 1000000 / hz / jobs)) commits=$commits cpu_us_per_commit=$((cpu * 1000000 / hz / (commits > 0 ? commits : 1)))"
      if [ "$side" = B ] && [ "$round" = 1 ]; then
        curl -s "127.0.0.1:$metrics/metrics" | grep '^delayd_delivery_lateness_seconds_bucket' |
          grep -E 'le="(0.001|0.005|0.01|0.05|0.25|1|\+Inf)"' | sed "s/^/  $mode B /" || true
      fi
      kill "$pid"
      wait "$pid" 2>/dev/null || true
      pid=""
      rm -rf "$work"
      work=""
    done
  done
done
