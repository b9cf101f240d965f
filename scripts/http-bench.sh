#!/usr/bin/env bash
# `delayd bench` against `delayd serve` (release builds), durability
# `always` and, as the same-run baseline, `never`: single-message enqueue
# with 64 producers, batch enqueue (100 per request), deliveries through
# lease (max 100) + ack, and a run paced at 20,000 messages/s.
# 100-byte payloads, delays spread over 1-3 s. Prints one JSON line a run.
# Usage: scripts/http-bench.sh [port]
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-17070}"
cargo build --release -q -p delayd
bin="${CARGO_TARGET_DIR:-target}/release/delayd"
for durability in always never; do
  data="$(mktemp -d)"
  "$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" \
    --durability "$durability" 2>/dev/null &
  pid=$!
  for _ in $(seq 100); do curl -fs "127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  common=(--server "http://127.0.0.1:$port" --json --payload-size 100 --delay-min 1s --delay-max 3s)
  echo "== $durability: single enqueue, 64 producers"
  "$bin" bench "${common[@]}" --producers 64 --consumers 8 --batch 1 --messages 30000 --duration 20s --drain 10s || true
  echo "== $durability: batch enqueue (100), lease max 100 + ack"
  "$bin" bench "${common[@]}" --producers 8 --consumers 8 --batch 100 --lease-max 100 --messages 200000 --duration 20s --drain 15s || true
  echo "== $durability: paced 20,000/s"
  "$bin" bench "${common[@]}" --producers 8 --consumers 8 --batch 20 --lease-max 100 --rate 20000 --messages 150000 --duration 10s --drain 10s || true
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$data"
done
