#!/usr/bin/env bash
# `delayd bench` against `delayd serve` (release builds unless DELAYD_BIN),
# durability `always` (and, with BASELINES=all, `never` as the same-run
# no-fsync baseline). First `delayd fsync-bench` in the directory that
# holds the data directories: the disk's own fsyncs per second and CPU per
# fsync (append, sparse, fallocate, prezeroed file). Then 100-byte
# payloads, delays spread over 1-3 s, leases of up to 100 that wait up to
# 1 s. Four runs per server (RUNS selects some):
#   single  one message per enqueue request (64 producers, HTTP/1.1: 64
#           connections), one ack request per message;
#   h2      the same over HTTP/2 (`--http2 --connections 4`, 256 producers:
#           64 streams per connection), one ack request per message;
#   batch   enqueue batches of 100 (8 producers), one batch ack request
#           (`POST .../acks`) per lease;
#   paced   batches of 20 paced to $RATE messages/s, batch acks.
# Each run prints bench's JSON line (with the server's commits from
# /metrics) and the server's CPU time per message (utime + stime from
# /proc/PID/stat over the run, divided by messages), its commits per second
# and its CPU time per commit (the CPU over the run divided by the
# delayd_commits_total delta).
# bench's JSON line carries the lateness p50/p99/p99.9/max and the
# server's stages; after each run, the longest state-lock hold per call
# site (from /metrics).
# Usage: scripts/http-bench.sh [messages]
# Env: PIN=1 (latency runs: the server on core 0, bench on core 1, with
#      `taskset`; unpinned otherwise),
#      MESSAGES (200000), RATE (20000), PORT (17070), BASELINES,
#      RUNS ("single h2 batch paced"), FSYNC_WRITES (2000),
#      DELAYD_BIN (default: $CARGO_TARGET_DIR/release/delayd, built),
#      SERVE_ARGS (more `delayd serve` flags, word-split: `--message-history
#      off` for history's baseline).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
messages="${1:-${MESSAGES:-200000}}"
rate="${RATE:-20000}"
port="${PORT:-17070}"
runs="${RUNS:-single h2 batch paced}"
delayd_bin
bin="$DELAYD_BIN"
# The data directories' parent: where the fsync bench measures the disk.
data_parent="${TMPDIR:-/tmp}"

echo "messages=$messages rate=$rate runs=\"$runs\" pin=${PIN:-0} load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
fsync_bench "$bin" "$data_parent" "${FSYNC_WRITES:-2000}"
for durability in always ${BASELINES:+never}; do
  data="$(mktemp -d -p "$data_parent")"
  $(pin 0) "$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" \
    --durability "$durability" ${SERVE_ARGS:-} 2>/dev/null &
  pid=$!
  wait_healthy "$port" "$pid"
  common=(--server "http://127.0.0.1:$port" --json --payload-size 100 --delay-min 1s --delay-max 3s
          --lease-max 100 --messages "$messages" --duration 60s --drain 15s)
  run() {
    local name=$1 before after commits_before commits_after started seconds line
    shift
    case " $runs " in *" $name "*) ;; *) return 0 ;; esac
    commits_before=$(commits_total "$port")
    metrics_snapshot "$port" "$data.metrics.before"
    before=$(cpu_ticks "$pid")
    started=$(now_s)
    line=$($(pin 1) "$bin" bench "${common[@]}" "$@" || true)
    seconds=$(awk -v a="$started" -v b="$(now_s)" 'BEGIN { print b - a }')
    after=$(cpu_ticks "$pid")
    commits_after=$(commits_total "$port")
    echo "== $durability $name: $line"
    echo "== $durability $name: server cpu_us_per_message=$(( (after - before) * 1000000 / $(getconf CLK_TCK) / messages ))" \
      "$(commit_figures "$commits_before" "$commits_after" "$seconds" "$((after - before))")"
    metrics_snapshot "$port" "$data.metrics.after"
    stage_report "$data.metrics.before" "$data.metrics.after" | grep '^== lock' | sed "s/^== /== $durability $name /"
    rm -f "$data.metrics.before" "$data.metrics.after"
  }
  run single --producers 64 --consumers 8 --batch 1
  run h2 --http2 --connections 4 --producers 256 --consumers 8 --batch 1
  run batch --producers 8 --consumers 8 --batch 100 --ack-batch
  run paced --producers 8 --consumers 8 --batch 20 --ack-batch --rate "$rate"
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$data"
done
