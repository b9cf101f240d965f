#!/usr/bin/env bash
# delayd's beanstalkd listener against a real beanstalkd, in one go, with the
# same client (crates/beanstalk/examples/compare.rs) and the same workload:
# 100-byte jobs, delays 1-3 s, 4 producer connections each writing puts in
# pipelined batches of 64, 4 consumer connections each keeping 8 reserves in
# flight (every RESERVED answered by its delete and a new reserve).
#
# Three runs per server: at full rate; with producers paced to $RATE puts/s;
# and a drain: every job due at one instant $DUE_IN s after the start (within
# the second after it: protocol delays are whole seconds), the consumers
# already waiting, rated by jobs / (last delete - that instant).
# Servers, in this order: beanstalkd 1.12 in memory, delayd
# `--durability always`, and with BASELINES=all also beanstalkd with
# `-b DIR -f0` (fsync per write) and delayd `--durability never`.
# Beside each rate: the server's CPU time per job (utime + stime from
# /proc/PID/stat over the run, divided by the jobs), which does not depend
# on the client sharing the cores, and for delayd its storage commits per
# second and CPU time per commit (the CPU over the run divided by the
# delayd_commits_total delta from /metrics on its HTTP port; n/a for
# beanstalkd). First `delayd fsync-bench` in the directory that holds the
# data directories prints the disk's own fsyncs per second and CPU per
# fsync (append, sparse, fallocate, prezeroed file) to read beside them.
#
# Each run reports lateness p50, p99, p99.9 and max (client side), and for
# delayd the server's own stages from /metrics (ready, leased, answered:
# the share later than 2.5 ms and the bucket bounds of p50/p99/p99.9) and
# the longest state-lock hold per call site.
#
# Usage: scripts/beanstalk-bench.sh [jobs]
# Env: PIN=1 (latency runs: every server on core 0, the client on core 1,
#      with `taskset`; unpinned otherwise),
#      MODES (the runs per server, in order; "max paced drain"),
#      JOBS (200000), RATE (20000), BOUND (put phase bound, s; 60),
#      DUE_IN (the drain's due instant, s after its start; 8),
#      BASELINES (`all` adds beanstalkd -f0 and delayd never),
#      DELAYD_BIN (default $CARGO_TARGET_DIR/release/delayd, built when
#      missing), COMPARE_BIN (the client; default
#      $CARGO_TARGET_DIR/release/examples/compare, built), FSYNC_WRITES
#      (2000), CARGO_TARGET_DIR (target), SERVE_ARGS (more `delayd serve`
#      flags, word-split: `--message-history off` for history's baseline).
# Installs the Debian beanstalkd package when missing (and stops the system
# service the package may start: this script uses its own free ports).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

JOBS=${1:-${JOBS:-200000}}
RATE=${RATE:-20000}
DUE_IN=${DUE_IN:-8}
MODES=${MODES:-max paced drain}
BOUND=${BOUND:-60}
BASELINES=${BASELINES:-}
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
    DELAYD_BIN=$TARGET_DIR/release/delayd
    [ -x "$DELAYD_BIN" ] || cargo build --release -q --bin delayd
fi
if [ -z "${COMPARE_BIN:-}" ]; then
    cargo build --release -q -p delayd-beanstalk --example compare
    COMPARE_BIN=$TARGET_DIR/release/examples/compare
fi
CLIENT=$COMPARE_BIN

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
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
HZ=$(getconf CLK_TCK)
# The HTTP port of the delayd under test (its /metrics); empty for
# beanstalkd, whose runs get n/a for the commit figures.
METRICS_PORT=""
# run_client NAME PORT MODE [client args]: one run, its CPU per job and
# (delayd) commits per second and CPU per commit appended.
run_client() {
    local name=$1 port=$2 mode=$3
    shift 3
    local before after line commits_before="" commits_after="" started seconds
    [ -z "$METRICS_PORT" ] || commits_before=$(commits_total "$METRICS_PORT")
    [ -z "$METRICS_PORT" ] || metrics_snapshot "$METRICS_PORT" "$WORK/metrics.before"
    before=$(cpu_ticks "$SERVER_PID")
    started=$(now_s)
    line=$($(pin 1) "$CLIENT" "127.0.0.1:$port" --jobs "$JOBS" --producers 4 --consumers 4 \
        --pipeline 64 --reserves 8 --delay-min 1 --delay-max 3 --seconds "$BOUND" \
        --label "$name" "$@")
    seconds=$(awk -v a="$started" -v b="$(now_s)" 'BEGIN { print b - a }')
    after=$(cpu_ticks "$SERVER_PID")
    [ -z "$METRICS_PORT" ] || commits_after=$(commits_total "$METRICS_PORT")
    line="$line mode=$mode cpu_us_per_job=$(( (after - before) * 1000000 / HZ / JOBS ))"
    line="$line $(commit_figures "$commits_before" "$commits_after" "$seconds" "$((after - before))")"
    echo "$line" | tee -a "$RESULTS"
    if [ -n "$METRICS_PORT" ]; then
        metrics_snapshot "$METRICS_PORT" "$WORK/metrics.after"
        stage_report "$WORK/metrics.before" "$WORK/metrics.after" | sed "s/^== /== $name $mode /"
    fi
}
# serve NAME PORT: the two runs against the server started just before.
serve_runs() {
    wait_port "$2"
    for mode in $MODES; do
        case $mode in
            max) run_client "$1" "$2" max ;;
            paced) run_client "$1" "$2" paced --rate "$RATE" ;;
            drain) run_client "$1" "$2" drain --due-in "$DUE_IN" ;;
            *) echo "unknown mode $mode (MODES: max paced drain)" >&2; exit 2 ;;
        esac
    done
    stop_server
}

echo "jobs=$JOBS rate=$RATE pin=${PIN:-0} load: $(cut -d' ' -f1-3 /proc/loadavg) cores: $(nproc)"
echo "beanstalkd: $(beanstalkd -v)  delayd: $DELAYD_BIN"
fsync_bench "$DELAYD_BIN" "$(dirname "$WORK")" "${FSYNC_WRITES:-2000}"

P=$(free_port)
$(pin 0) beanstalkd -l 127.0.0.1 -p "$P" -z 65535 & SERVER_PID=$!
serve_runs beanstalkd-mem "$P"

if [ "$BASELINES" = all ]; then
    P=$(free_port)
    mkdir "$WORK/binlog"
    $(pin 0) beanstalkd -l 127.0.0.1 -p "$P" -b "$WORK/binlog" -f0 & SERVER_PID=$!
    serve_runs beanstalkd-f0 "$P"
fi

for durability in always ${BASELINES:+never}; do
    P=$(free_port)
    METRICS_PORT=$(free_port)
    mkdir "$WORK/delayd-$durability"
    RUST_LOG=warn $(pin 0) "$DELAYD_BIN" serve --http "127.0.0.1:$METRICS_PORT" --beanstalk "127.0.0.1:$P" \
        --data "$WORK/delayd-$durability" --durability "$durability" ${SERVE_ARGS:-} & SERVER_PID=$!
    wait_healthy "$METRICS_PORT" "$SERVER_PID"
    serve_runs "delayd-$durability" "$P"
    METRICS_PORT=""
done

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The table: one row per run, ratios of delayd to beanstalkd in memory.
awk '
function field(line, key,   re) {
    re = " " key "=[^ ]*"
    if (match(line, re)) return substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 2)
    return ""
}
{
    line = " " $0
    label = field(line, "label"); m = field(line, "mode")
    puts[label, m] = field(line, "puts_per_s"); dels[label, m] = field(line, "deliveries_per_s")
    p99[label, m] = field(line, "late_p99_ms"); lost[label, m] = field(line, "lost")
    p50[label, m] = field(line, "late_p50_ms"); p999[label, m] = field(line, "late_p999_ms")
    mx[label, m] = field(line, "late_max_ms")
    early[label, m] = field(line, "early"); dup[label, m] = field(line, "dup")
    cpu[label, m] = field(line, "cpu_us_per_job")
    cps[label, m] = field(line, "commits_per_s"); cpc[label, m] = field(line, "cpu_us_per_commit")
    drain[label, m] = field(line, "drain_per_s"); before[label, m] = field(line, "puts_before_due")
    if (!(label in seen)) { seen[label] = 1; names[++n] = label }
}
function ratio(a, b) { return (b > 0) ? sprintf("%.2fx", a / b) : "n/a" }
END {
    printf "\n%-16s %6s %9s %12s %31s %8s %9s %13s %5s %5s %4s\n", "server", "mode", "puts/s", "deliveries/s", "late p50/p99/p99.9/max (ms)", "cpu/job", "commits/s", "cpu/commit", "lost", "early", "dup"
    split("max paced drain", modes, " ")
    for (i = 1; i <= 3; i++) for (j = 1; j <= n; j++) {
        s = names[j]; m = modes[i]
        c = cpc[s, m]; c = (c == "n/a") ? c "   " : c " us"
        lat = p50[s, m] "/" p99[s, m] "/" p999[s, m] "/" mx[s, m]
        printf "%-16s %6s %9s %12s %31s %5s us %9s %13s %5s %5s %4s\n", s, m, puts[s, m], dels[s, m], lat, cpu[s, m], cps[s, m], c, lost[s, m], early[s, m], dup[s, m]
    }
    b = "beanstalkd-mem"
    printf "\ndelayd-always / beanstalkd in memory: puts %s, deliveries %s (max rate); p99 / p99.9 lateness %s / %s ms vs %s / %s ms (paced)\n",
        ratio(puts["delayd-always", "max"], puts[b, "max"]), ratio(dels["delayd-always", "max"], dels[b, "max"]),
        p99["delayd-always", "paced"], p999["delayd-always", "paced"], p99[b, "paced"], p999[b, "paced"]
    printf "drain (jobs / (last delete - due instant)):"
    for (j = 1; j <= n; j++) printf " %s %s/s%s", names[j], drain[names[j], "drain"], (before[names[j], "drain"] == "true") ? "" : " (puts ran past the due instant)"
    printf "; delayd-always / beanstalkd in memory: %s\n", ratio(drain["delayd-always", "drain"], drain[b, "drain"])
}' "$RESULTS"
