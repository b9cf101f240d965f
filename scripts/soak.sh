#!/usr/bin/env bash
# A bounded soak: a release `delayd serve` (own free port, temporary data
# directory, durability `always`) under `delayd bench` enqueueing at RATE
# messages/s for DURATION seconds over HTTP, every message leased and
# acked. Every INTERVAL seconds the server's RSS and open file descriptors
# are read from /proc/PID, and the store's block cache fill from
# /metrics (`delayd_storage_cache_bytes`), into a CSV.
#
# Verdict: the samples after WARMUP seconds are cut into thirds; the last
# third's maximum may exceed the first third's maximum by at most
# RSS_TOLERANCE_PCT percent (RSS net of the block cache, which fills up to
# its fixed capacity `--cache-size` over the first minutes and is bounded
# by it) and FD_TOLERANCE descriptors. Raw RSS is printed beside it. Exits
# non-zero when either grew beyond that, when the bench failed (lost or
# undelivered messages), or when the server died.
#
# Usage: scripts/soak.sh
# Env: DURATION (600), RATE (5000), INTERVAL (10), WARMUP (60, at most a
#      third of DURATION), BATCH (10 messages per enqueue request),
#      RSS_TOLERANCE_PCT (20), FD_TOLERANCE (16), OUT (CSV path; default a
#      temporary file, printed), SERVE_ARGS (extra `delayd serve` options).
#
# With faults (kill -9 and restart every few minutes, a full disk once,
# producers and consumers checked for 0 lost, 0 early and explained
# duplicates): scripts/soak-faults.py (run as root; docs/robustness.md,
# "The soak with faults").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
duration="${DURATION:-600}"
rate="${RATE:-5000}"
interval="${INTERVAL:-10}"
warmup="${WARMUP:-60}"
[ "$warmup" -gt $((duration / 3)) ] && warmup=$((duration / 3))
batch="${BATCH:-10}"
rss_tol="${RSS_TOLERANCE_PCT:-20}"
fd_tol="${FD_TOLERANCE:-16}"
out="${OUT:-$(mktemp --suffix=.csv)}"

cargo build --release -q -p delayd
bin="${CARGO_TARGET_DIR:-target}/release/delayd"
port=$(free_port)
data="$(mktemp -d)"
log="$(mktemp)"
# SERVE_ARGS: extra `delayd serve` options (e.g. `--cache-size 8MiB`).
# shellcheck disable=SC2086
"$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" ${SERVE_ARGS:-} 2>"$log" &
pid=$!
bench_pid=""
cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$log"
}
trap cleanup EXIT
wait_healthy "$port" "$pid"

echo "soak: ${duration}s at ${rate}/s (batch $batch), pid $pid, port $port, samples in $out"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
bench_out="$(mktemp)"
"$bin" bench --server "http://127.0.0.1:$port" --json --rate "$rate" \
  --messages $((rate * duration)) --duration "${duration}s" --drain 15s \
  --producers 8 --consumers 8 --batch "$batch" --lease-max 100 --ack-batch \
  --payload-size 100 --delay-min 0s --delay-max 1s >"$bench_out" 2>&1 &
bench_pid=$!

echo "t_s,rss_kb,fds,cache_kb" >"$out"
start=$(date +%s)
while kill -0 "$bench_pid" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died"; tail -20 "$log"; exit 1; }
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  cache=$(curl -fs --max-time 5 "127.0.0.1:$port/metrics" |
    awk '$1 == "delayd_storage_cache_bytes" {printf "%d", $2 / 1024}')
  t=$(($(date +%s) - start))
  echo "$t,$rss,$fds,${cache:-0}" | tee -a "$out"
  sleep "$interval"
done
bench_status=0
wait "$bench_pid" || bench_status=$?
bench_pid=""
echo "bench (exit $bench_status): $(tail -1 "$bench_out")"
rm -f "$bench_out"

# Flatness: max of the first and last thirds of the post-warm-up samples.
verdict=0
python3 - "$out" "$warmup" "$rss_tol" "$fd_tol" <<'EOF' || verdict=$?
import csv, sys
path, warmup, rss_tol, fd_tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rows = [r for r in csv.DictReader(open(path)) if int(r["t_s"]) >= warmup]
if len(rows) < 3:
    print(f"FAIL: only {len(rows)} samples after the {warmup}s warm-up")
    sys.exit(1)
third = len(rows) // 3
first, last = rows[:third], rows[-third:]
for r in rows:
    r["net_kb"] = int(r["rss_kb"]) - int(r["cache_kb"])
def peak(rs, k): return max(int(r[k]) for r in rs)
raw0, raw1 = peak(first, "rss_kb"), peak(last, "rss_kb")
cache0, cache1 = peak(first, "cache_kb"), peak(last, "cache_kb")
rss0, rss1 = peak(first, "net_kb"), peak(last, "net_kb")
fd0, fd1 = peak(first, "fds"), peak(last, "fds")
rss_ok = rss1 <= rss0 * (1 + rss_tol / 100)
fd_ok = fd1 <= fd0 + fd_tol
print(f"raw rss_kb first-third max {raw0}, last-third max {raw1} ({(raw1 - raw0) * 100 / raw0:+.1f}%); "
      f"block cache kb max {cache0} then {cache1}")
print(f"rss_kb net of the block cache: first-third max {rss0}, last-third max {rss1} "
      f"({(rss1 - rss0) * 100 / rss0:+.1f}%, tolerance {rss_tol:g}%): {'flat' if rss_ok else 'GROWING'}")
print(f"fds first-third max {fd0}, last-third max {fd1} (tolerance +{fd_tol}): "
      f"{'flat' if fd_ok else 'GROWING'}")
sys.exit(0 if rss_ok and fd_ok else 1)
EOF
if [ "$bench_status" != 0 ] || [ "$verdict" != 0 ]; then
  echo "FAIL"
  exit 1
fi
echo "PASS"
