#!/usr/bin/env bash
# The cost of flow control's gate when it never binds: `delayd bench`
# against one `delayd serve`, alternating a queue without `flow` and a
# queue whose `flow` is set but never holds anything (rate 1,000,000 per
# ms with a burst of 1,000,000, concurrency 1,000,000). Same server, same
# client, same workload: 100-byte payloads due at once, 64 producers (one
# message per request), 8 consumers leasing up to 100, one ack request per
# message. Each run prints bench's JSON line and the server's CPU time per
# message (utime + stime from /proc/PID/stat over the run).
# With PROTOCOL=beanstalk the same comparison runs over the beanstalkd
# protocol instead: the beanstalkd load client
# (crates/beanstalk/examples/compare.rs: 4 producer connections putting
# pipelined batches of 64, 4 consumer connections with 8 reserves in flight,
# delay 0) against the tube `default`, whose queue's `flow` is removed for
# the plain runs and set (never binding, as above) for the gated ones.
# With KEYS=N (HTTP only) the gated queue is `key_concurrency: 1` instead and
# its runs give message n the key `k{n % N}` (`delayd bench --keys N`),
# against plain runs without keys: the cost of many keys.
# Usage: scripts/flow-bench.sh [messages]
# Env: MESSAGES (100000), PORT (17071), ROUNDS (2), DURABILITY (always),
#      PROTOCOL (http | beanstalk), BPORT (17072), KEYS (unset),
#      DELAYD_BIN (default: $CARGO_TARGET_DIR/release/delayd, built),
#      COMPARE_BIN (default: $CARGO_TARGET_DIR/release/examples/compare, built).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
messages="${1:-${MESSAGES:-100000}}"
port="${PORT:-17071}"
rounds="${ROUNDS:-2}"
durability="${DURABILITY:-always}"
protocol="${PROTOCOL:-http}"
bport="${BPORT:-17072}"
delayd_bin
if [ "$protocol" = beanstalk ] && [ -z "${COMPARE_BIN:-}" ]; then
  cargo build --release -q -p delayd-beanstalk --example compare
  COMPARE_BIN="${CARGO_TARGET_DIR:-target}/release/examples/compare"
fi
bin="$DELAYD_BIN"
server="http://127.0.0.1:$port"
gate=(--rate 1000000/1ms --burst 1000000 --concurrency 1000000)
keyed=()
if [ -n "${KEYS:-}" ]; then
  gate=(--key-concurrency 1)
  keyed=(--keys "$KEYS")
fi

echo "messages=$messages durability=$durability protocol=$protocol keys=${KEYS:-none} load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
data="$(mktemp -d)"
beanstalk=off
[ "$protocol" = beanstalk ] && beanstalk="127.0.0.1:$bport"
"$bin" serve --http "127.0.0.1:$port" --beanstalk "$beanstalk" --data "$data" \
  --durability "$durability" 2>/dev/null &
pid=$!
wait_healthy "$port" "$pid"
"$bin" queue set plain --server "$server" >/dev/null
"$bin" queue set gated --server "$server" "${gate[@]}" >/dev/null
run_beanstalk() {
  local queue=$1 before after line
  if [ "$queue" = gated ]; then
    "$bin" queue set default --server "$server" "${gate[@]}" >/dev/null
  else
    "$bin" queue set default --server "$server" --no-flow >/dev/null
  fi
  before=$(cpu_ticks "$pid")
  line=$("$COMPARE_BIN" "127.0.0.1:$bport" --jobs "$messages" --producers 4 --consumers 4 \
    --pipeline 64 --reserves 8 --delay-min 0 --delay-max 0 --seconds 60 --label "$queue" || true)
  after=$(cpu_ticks "$pid")
  echo "== $queue: $line"
  echo "== $queue: server cpu_us_per_message=$(( (after - before) * 1000000 / $(getconf CLK_TCK) / messages ))"
}
run() {
  if [ "$protocol" = beanstalk ]; then
    run_beanstalk "$1"
    return
  fi
  local queue=$1 before after line keys=()
  [ "$queue" = gated ] && keys=("${keyed[@]}")
  before=$(cpu_ticks "$pid")
  line=$("$bin" bench --server "$server" --json --queue "$queue" --payload-size 100 "${keys[@]}" \
    --delay-min 0s --delay-max 0s --lease-max 100 --messages "$messages" \
    --producers 64 --consumers 8 --batch 1 --duration 60s --drain 15s || true)
  after=$(cpu_ticks "$pid")
  echo "== $queue: $line"
  echo "== $queue: server cpu_us_per_message=$(( (after - before) * 1000000 / $(getconf CLK_TCK) / messages ))"
}
for _ in $(seq "$rounds"); do
  run plain
  run gated
done
kill -TERM "$pid"
wait "$pid" || true
rm -rf "$data"
