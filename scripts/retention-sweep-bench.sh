#!/usr/bin/env bash
# The retention sweeper's state-lock holds: 100,000 messages acked on a
# queue that retains them 8 s, then the lock-hold histogram of site "call"
# when the last ack returned and 20 s later, after the sweeper reclaimed
# them (no other calls meanwhile): columns bucket, before, after, the
# sweeper's holds. Usage: scripts/retention-sweep-bench.sh
# Env: DELAYD_BIN (default: the release build), PORT (17171).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
delayd_bin
bin="$DELAYD_BIN"
data=$(mktemp -d)
port="${PORT:-17171}"
"$bin" serve --http 127.0.0.1:$port --beanstalk off --data "$data" 2>/dev/null &
pid=$!
trap 'kill $pid; rm -rf "$data"' EXIT
for i in $(seq 50); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
curl -sf -X PUT http://127.0.0.1:$port/v1/queues/retq -d '{"retain_ms": 8000}' >/dev/null
"$bin" bench --server http://127.0.0.1:$port --queue retq --keep --messages 100000 --batch 100 --producers 4 --consumers 4 --ack-batch --delay-min 0s --delay-max 0s --json | grep -o '"delivered":[0-9]*'
snap() { curl -sf http://127.0.0.1:$port/metrics | grep 'delayd_state_lock_hold_seconds_bucket{site="call"' ; }
snap > /tmp/sweep-before.txt
sleep 20
snap > /tmp/sweep-after.txt
paste /tmp/sweep-before.txt /tmp/sweep-after.txt | awk '{split($1,a," "); print $1, $2, $4, $4-$2}' | sed 's/delayd_state_lock_hold_seconds_bucket{site="call",//'
