#!/usr/bin/env bash
# The cost of scoped tokens on the HTTP path (issue 40's target: <= 2% of
# throughput): one build, one workload, two servers alternating ROUNDS
# times:
#   none    `delayd serve` without tokens;
#   scoped  the same with `--token-file` of 1,000 scoped tokens of 20 scopes
#           each; bench's token is one of them, its 20 scopes publish and
#           consume decoys for other queues first and the ones that match
#           last, so each request hashes the token, finds it among 1,000
#           and matches its globs until the last scopes.
# The workload is http-bench.sh's `single` (one message per enqueue
# request, one ack request per message, 64 producers, 8 consumers,
# 100-byte payloads due in 1-3 s) at `--durability never`: no fsync, so the
# per-request work the tokens add is the largest share it can be. Each run
# prints enqueued/s, delivered/s and the server's CPU time per message
# (utime + stime over the run), with the load average before it.
# With PERF=1 each server also runs under `perf record` and the run prints
# the share of its CPU samples in the token check's own functions (the
# SHA-256, the digest lookup, the constant-time compare, the scope check,
# the bearer parsing): a figure that other load on the machine does not
# move, unlike the rates (the "none" runs give the floor those symbols
# have without tokens).
# Usage: scripts/token-bench.sh (rounds alternate the order: none first, then scoped first)
# Env: DELAYD_BIN (default: $CARGO_TARGET_DIR/release/delayd, built),
#      MESSAGES (100000), ROUNDS (3), PIN=1 (server on core 0, bench on 1),
#      PERF=1.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
messages="${MESSAGES:-100000}"
rounds="${ROUNDS:-3}"
delayd_bin
bin="$DELAYD_BIN"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The token file: 999 others, then bench's, each with 20 scopes.
secret="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
python3 - "$work/tokens.toml" "$secret" <<'PY'
import hashlib, os, sys
path, secret = sys.argv[1], sys.argv[2]
def decoys(n):
    return [f'{"publish" if i % 2 else "consume"}:team-{i:02d}-*' for i in range(n)]
with open(path, "w") as f:
    for t in range(1000):
        mine = t == 999
        s = secret if mine else os.urandom(16).hex()
        scopes = decoys(16) + (["publish:bench-*", "consume:bench-*", "admin:bench-*", "read:*"]
                               if mine else [f"read:other-{t}-*"] * 4)
        f.write(f'[[token]]\nname = "token-{t:04d}"\n'
                f'sha256 = "{hashlib.sha256(s.encode()).hexdigest()}"\n'
                f'scopes = [{", ".join(repr(x).replace(chr(39), chr(34)) for x in scopes)}]\n\n')
PY

run() {
  local name=$1 port pid data before after line
  shift
  port=$(free_port)
  data="$(mktemp -d -p "$work")"
  $(pin 0) "$bin" serve --http "127.0.0.1:$port" --beanstalk off --data "$data" \
    --durability never "$@" 2>/dev/null &
  pid=$!
  wait_healthy "$port" "$pid"
  local perf_pid=""
  if [ "${PERF:-}" = 1 ]; then
    perf record -F 1999 -p "$pid" -o "$work/perf.data" 2>/dev/null &
    perf_pid=$!
  fi
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  before=$(cpu_ticks "$pid")
  line=$($(pin 1) "$bin" bench --server "http://127.0.0.1:$port" --token "$secret" --json \
    --payload-size 100 --delay-min 1s --delay-max 3s --lease-max 100 --messages "$messages" \
    --duration 60s --drain 15s --producers 64 --consumers 8 --batch 1 || true)
  after=$(cpu_ticks "$pid")
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
  fi
  kill -TERM "$pid"
  wait "$pid" || true
  if [ -n "$perf_pid" ]; then
    perf report -i "$work/perf.data" --sort symbol --stdio 2>/dev/null |
      awk -v name="$name" '/^ +[0-9.]+%/ && /sha2::|keyring::|access::|auth::|subtle::|arc_swap::|percent_encoding::/ {
        p = $1; sub("%", "", p); s += p } END { printf "== %s: token-check share of server CPU samples=%.2f%%\n", name, s }'
    rm -f "$work/perf.data"
  fi
  rm -rf "$data"
  python3 - "$name" "$line" "$(( (after - before) * 1000000 / $(getconf CLK_TCK) / messages ))" "$load" <<'PY'
import json, sys
name, line, cpu, load = sys.argv[1:5]
r = json.loads(line)
print(f"== {name}: enqueued/s={r['enqueue_per_second']:.0f} delivered/s={r['delivery_per_second']:.0f} "
      f"server_cpu_us_per_message={cpu} load_before={load}")
PY
}

echo "messages=$messages rounds=$rounds pin=${PIN:-0} cores=$(nproc) load: $(cut -d' ' -f1-3 /proc/loadavg)"
# ABBA: the order alternates each round, so a drift over the run (the
# page cache, the disk, the CPU's clock) weighs on both alike.
for round in $(seq "$rounds"); do
  echo "-- round $round"
  if [ $((round % 2)) = 1 ]; then
    run none
    run scoped --token-file "$work/tokens.toml"
  else
    run scoped --token-file "$work/tokens.toml"
    run none
  fi
done
