#!/usr/bin/env bash
# delayd's beanstalkd listener against a real beanstalkd, in one go, with the
# same client (crates/beanstalk/examples/compare.rs) and the same workload:
# 100-byte jobs, delays 1-3 s, 4 producers, 4 consumers, request/response
# puts (pipeline 1) and pipelined puts (pipeline $PIPELINE).
#
#   1. beanstalkd in memory            (beanstalkd -l 127.0.0.1 -p P1)
#   2. beanstalkd, binlog fsync/write  (beanstalkd -l 127.0.0.1 -p P2 -b DIR -f0)
#   3. delayd --durability always      (delayd serve --beanstalk 127.0.0.1:P3 ...)
#
# Usage: scripts/beanstalk-bench.sh [jobs] [pipeline]
# Env: JOBS (20000), PIPELINE (16), BOUND (put phase bound, s; 30),
#      DELAYD_BIN (default /tmp/target-release/release/delayd if present,
#      else $CARGO_TARGET_DIR/release/delayd, built when missing),
#      CARGO_TARGET_DIR (target).
# Installs the Debian beanstalkd package when missing (and stops the system
# service the package may start: this script uses its own free ports).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${1:-${JOBS:-20000}}
PIPELINE=${2:-${PIPELINE:-16}}
BOUND=${BOUND:-30}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

sudo_cmd() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v beanstalkd >/dev/null 2>&1; then
    echo "installing beanstalkd (apt-get)" >&2
    sudo_cmd apt-get update -qq
    sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq beanstalkd >/dev/null
    # The package enables a service on 11300; stop it if it actually started.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        sudo_cmd systemctl stop beanstalkd >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
        sudo_cmd service beanstalkd stop >/dev/null 2>&1 || true
    fi
fi

if [ -z "${DELAYD_BIN:-}" ]; then
    if [ -x /tmp/target-release/release/delayd ]; then
        DELAYD_BIN=/tmp/target-release/release/delayd
    else
        DELAYD_BIN=$TARGET_DIR/release/delayd
        [ -x "$DELAYD_BIN" ] || cargo build --release -q --bin delayd
    fi
fi
cargo build --release -q -p delayd-beanstalk --example compare
CLIENT=$TARGET_DIR/release/examples/compare

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        port_open "$p" || { echo "$p"; return; }
    done
}
wait_port() {
    for _ in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done
    echo "server on port $1 did not start" >&2
    return 1
}
stop_server() {
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

RESULTS=$WORK/results
: >"$RESULTS"
# run_client NAME PORT: the two runs (request/response, pipelined).
run_client() {
    for k in 1 "$PIPELINE"; do
        "$CLIENT" "127.0.0.1:$2" --jobs "$JOBS" --producers 4 --consumers 4 \
            --pipeline "$k" --delay-min 1 --delay-max 3 --seconds "$BOUND" \
            --label "$1" | tee -a "$RESULTS"
    done
}

echo "jobs=$JOBS pipeline=1,$PIPELINE load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
echo "beanstalkd: $(beanstalkd -v)  delayd: $DELAYD_BIN"

P=$(free_port)
beanstalkd -l 127.0.0.1 -p "$P" & SERVER_PID=$!
wait_port "$P"
run_client beanstalkd-mem "$P"
stop_server

P=$(free_port)
mkdir "$WORK/binlog"
beanstalkd -l 127.0.0.1 -p "$P" -b "$WORK/binlog" -f0 & SERVER_PID=$!
wait_port "$P"
run_client beanstalkd-f0 "$P"
stop_server

P=$(free_port)
mkdir "$WORK/delayd"
RUST_LOG=warn "$DELAYD_BIN" serve --http 127.0.0.1:0 --beanstalk "127.0.0.1:$P" \
    --data "$WORK/delayd" --durability always & SERVER_PID=$!
wait_port "$P"
run_client delayd-always "$P"
stop_server

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The table: one row per run, ratios of delayd to each beanstalkd.
awk '
function field(line, key,   re, m) {
    re = key "=[^ ]*"
    if (match(line, re)) { m = substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1); return m }
    return ""
}
{
    label = field($0, "label"); k = field($0, "pipeline")
    puts[label, k] = field($0, "puts_per_s"); dels[label, k] = field($0, "deliveries_per_s")
    p99[label, k] = field($0, "late_p99_ms"); lost[label, k] = field($0, "lost")
    early[label, k] = field($0, "early"); dup[label, k] = field($0, "dup")
    if (!(k in seen)) { seen[k] = 1; ks[++nk] = k }
}
function ratio(a, b) { return (b > 0) ? sprintf("%.1fx", a / b) : "n/a" }
END {
    printf "\n%-15s %4s %10s %12s %10s %6s %6s %4s\n", "server", "pipe", "puts/s", "deliveries/s", "p99 late", "lost", "early", "dup"
    n = split("beanstalkd-mem beanstalkd-f0 delayd-always", names, " ")
    for (i = 1; i <= nk; i++) for (j = 1; j <= n; j++) {
        s = names[j]; k = ks[i]
        printf "%-15s %4s %10s %12s %8s ms %6s %6s %4s\n", s, k, puts[s, k], dels[s, k], p99[s, k], lost[s, k], early[s, k], dup[s, k]
    }
    printf "\n%4s %22s %22s %22s %22s\n", "pipe", "puts delayd/mem", "puts delayd/f0", "deliv delayd/mem", "deliv delayd/f0"
    for (i = 1; i <= nk; i++) {
        k = ks[i]; d = "delayd-always"
        printf "%4s %22s %22s %22s %22s\n", k,
            ratio(puts[d, k], puts["beanstalkd-mem", k]), ratio(puts[d, k], puts["beanstalkd-f0", k]),
            ratio(dels[d, k], dels["beanstalkd-mem", k]), ratio(dels[d, k], dels["beanstalkd-f0", k])
    }
}' "$RESULTS"
