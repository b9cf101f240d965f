#!/usr/bin/env bash
# `delayd bench` against `delayd serve` (release builds), durability `always`
# (and, with BASELINES=all, `never` as the same-run no-fsync baseline).
# 100-byte payloads, delays spread over 1-3 s, leases of up to 100 that wait
# up to 1 s. Three runs per server:
#   single  one message per enqueue request (64 producers), one ack request
#           per message;
#   batch   enqueue batches of 100 (8 producers), one batch ack request
#           (`POST .../acks`) per lease;
#   paced   batches of 20 paced to $RATE messages/s, batch acks.
# Each run prints bench's JSON line and the server's CPU time per message
# (utime + stime from /proc/PID/stat over the run, divided by messages).
# Usage: scripts/http-bench.sh [messages]
# Env: MESSAGES (200000), RATE (20000), PORT (17070), BASELINES.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
messages="${1:-${MESSAGES:-200000}}"
rate="${RATE:-20000}"
port="${PORT:-17070}"
cargo build --release -q -p delayd
bin="${CARGO_TARGET_DIR:-target}/release/delayd"
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "messages=$messages rate=$rate load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
for durability in always ${BASELINES:+never}; do
  data="$(mktemp -d)"
  "$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" \
    --durability "$durability" 2>/dev/null &
  pid=$!
  wait_healthy "$port" "$pid"
  common=(--server "http://127.0.0.1:$port" --json --payload-size 100 --delay-min 1s --delay-max 3s
          --lease-max 100 --messages "$messages" --duration 60s --drain 15s)
  run() {
    local name=$1 before after line
    shift
    before=$(cpu_ticks "$pid")
    line=$("$bin" bench "${common[@]}" "$@" || true)
    after=$(cpu_ticks "$pid")
    echo "== $durability $name: $line"
    echo "== $durability $name: server cpu_us_per_message=$(( (after - before) * 1000000 / hz / messages ))"
  }
  run single --producers 64 --consumers 8 --batch 1
  run batch --producers 8 --consumers 8 --batch 100 --ack-batch
  run paced --producers 8 --consumers 8 --batch 20 --ack-batch --rate "$rate"
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$data"
done
