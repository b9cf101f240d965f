#!/usr/bin/env bash
# The cost of flow control's gate when it never binds: `delayd bench`
# against one `delayd serve`, alternating a queue without `flow` and a
# queue whose `flow` is set but never holds anything (rate 1,000,000 per
# ms with a burst of 1,000,000, concurrency 1,000,000). Same server, same
# client, same workload: 100-byte payloads due at once, 64 producers (one
# message per request), 8 consumers leasing up to 100, one ack request per
# message. Each run prints bench's JSON line and the server's CPU time per
# message (utime + stime from /proc/PID/stat over the run).
# Usage: scripts/flow-bench.sh [messages]
# Env: MESSAGES (100000), PORT (17071), ROUNDS (2), DURABILITY (always),
#      DELAYD_BIN (default: $CARGO_TARGET_DIR/release/delayd, built).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
messages="${1:-${MESSAGES:-100000}}"
port="${PORT:-17071}"
rounds="${ROUNDS:-2}"
durability="${DURABILITY:-always}"
if [ -z "${DELAYD_BIN:-}" ]; then
  cargo build --release -q -p delayd
  DELAYD_BIN="${CARGO_TARGET_DIR:-target}/release/delayd"
fi
bin="$DELAYD_BIN"
server="http://127.0.0.1:$port"

echo "messages=$messages durability=$durability load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
data="$(mktemp -d)"
"$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" \
  --durability "$durability" 2>/dev/null &
pid=$!
wait_healthy "$port" "$pid"
"$bin" queue set plain --server "$server" >/dev/null
"$bin" queue set gated --server "$server" --rate 1000000/1ms --burst 1000000 \
  --concurrency 1000000 >/dev/null
run() {
  local queue=$1 before after line
  before=$(cpu_ticks "$pid")
  line=$("$bin" bench --server "$server" --json --queue "$queue" --payload-size 100 \
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
