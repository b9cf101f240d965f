# Helpers for the scripts that start their own `delayd serve`
# (soak.sh, fuzz-http-live.sh, http-bench.sh, beanstalk-bench.sh). Source
# it; it sets nothing.

# A TCP port on 127.0.0.1 that is free now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_healthy PORT PID: waits until the server on PORT answers /healthz
# (10 s at most); fails, saying why, when PID exits first or time runs out.
wait_healthy() {
  for _ in $(seq 100); do
    curl -fs "127.0.0.1:$1/healthz" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "delayd serve (pid $2) exited before answering" >&2; return 1; }
    sleep 0.1
  done
  echo "delayd serve on port $1 did not answer /healthz within 10 s" >&2
  return 1
}

# cpu_ticks PID: the process's utime + stime so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# now_s: wall-clock seconds, with nanoseconds.
now_s() { date +%s.%N; }

# commits_total PORT: the server's storage commits so far
# (`delayd_commits_total` from /metrics, summed over label sets; 0 before
# the first); prints nothing when /metrics cannot be read.
commits_total() {
  local text
  text=$(curl -fs "127.0.0.1:$1/metrics") || return 0
  printf '%s\n' "$text" |
    awk '/^delayd_commits_total[ {]/ { sub(/\{[^}]*\}/, ""); s += $2 } END { print s + 0 }'
}

# commit_figures BEFORE AFTER SECONDS TICKS: `commits_per_s=R
# cpu_us_per_commit=C` from two commits_total readings around a run of
# SECONDS during which the server used TICKS of CPU; n/a when a reading
# is missing or no commit happened.
commit_figures() {
  awk -v b="$1" -v a="$2" -v s="$3" -v t="$4" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    if (b == "" || a == "" || a - b <= 0 || s <= 0) {
      print "commits_per_s=n/a cpu_us_per_commit=n/a"; exit
    }
    n = a - b
    printf "commits_per_s=%.0f cpu_us_per_commit=%.1f\n", n / s, t * 1000000 / hz / n
  }'
}

# fsync_bench BIN DIR WRITES: `delayd fsync-bench` in DIR, one line per
# file layout prefixed `== fsync`: the disk's own fsync rate and CPU per
# fsync, to read beside the server's commits.
fsync_bench() {
  "$1" fsync-bench --dir "$2" --writes "$3" --json | sed 's/^/== fsync: /'
}

# pin CORE: the command prefix that runs a command on CPU core CORE when
# delayd_bin: DELAYD_BIN, or else a release build made now (its path is
# set in DELAYD_BIN). Call it in the script's shell, not in `$(...)`.
delayd_bin() {
  if [ -z "${DELAYD_BIN:-}" ]; then
    cargo build --release -q -p delayd
    DELAYD_BIN="${CARGO_TARGET_DIR:-target}/release/delayd"
  fi
}

# PIN=1 (latency runs: the server on core 0, the load client on core 1,
# so neither steals the other's CPU), nothing otherwise. Unquoted before
# the command, `$(pin 0) server ... &`, so that `$!` is the server's pid
# (taskset execs it; a shell function run in the background would be a
# subshell of its own).
pin() {
  if [ "${PIN:-}" = 1 ]; then echo "taskset -c $1"; fi
}

# metrics_snapshot PORT FILE: the server's /metrics text into FILE (empty
# when it cannot be read), to compare two readings with stage_report.
metrics_snapshot() {
  curl -fs "127.0.0.1:$1/metrics" >"$2" 2>/dev/null || : >"$2"
}

# stage_report BEFORE AFTER: from two /metrics snapshots, one line per
# lateness stage (`delayd_delivery_lateness_seconds{stage}`: ready, leased,
# answered): messages, the share later than 2.5 ms, and the bucket bounds
# holding p50, p99 and p99.9 (a bound, not a value), the commit groups'
# phases (`delayd_commit_phase_seconds`), and the longest state-lock hold
# per site (the bucket bound holding its max).
stage_report() {
  python3 - "$1" "$2" <<'PY'
import re, sys
def read(path):
    out = {}
    for line in open(path):
        m = re.match(r'(delayd_delivery_lateness_seconds|delayd_state_lock_hold_seconds|delayd_commit_phase_seconds)_bucket\{(stage|site|phase)="([^"]+)",le="([^"]+)"\} (\S+)', line)
        if m:
            out.setdefault((m.group(1), m.group(3)), []).append((float(m.group(4)), float(m.group(5))))
    return out
before, after = read(sys.argv[1]), read(sys.argv[2])
def delta(key):
    b = dict(before.get(key, []))
    return sorted((le, c - b.get(le, 0)) for le, c in after[key])
def bound(buckets, q):
    total = buckets[-1][1]
    for le, c in buckets:
        if c >= q * total:
            return "inf" if le == float("inf") else "%g ms" % (le * 1000)
    return "inf"
def series(name, labels):
    """(label, bucket deltas) of each label of `name` with observations."""
    for label in labels:
        key = (name, label)
        if key in after:
            buckets = delta(key)
            if buckets[-1][1] > 0:
                yield label, buckets, buckets[-1][1]
def longest(buckets, total):
    le = next((le for le, c in buckets if c >= total), float("inf"))
    return "inf" if le == float("inf") else "%g ms" % (le * 1000)
for stage, buckets, total in series("delayd_delivery_lateness_seconds", ("ready", "leased", "answered")):
    within = dict(buckets).get(0.0025, 0)
    print("== stage %s: messages=%d later_than_2.5ms=%.3f%% p50<=%s p99<=%s p99.9<=%s"
          % (stage, total, 100 * (total - within) / total, bound(buckets, .5), bound(buckets, .99), bound(buckets, .999)))
for phase, buckets, total in series("delayd_commit_phase_seconds", ("open", "write", "fsync", "publish")):
    print("== commit %s: groups=%d p50<=%s p99<=%s longest<=%s"
          % (phase, total, bound(buckets, .5), bound(buckets, .99), longest(buckets, total)))
sites = sorted(site for (name, site) in after if name == "delayd_state_lock_hold_seconds")
for site, buckets, total in series("delayd_state_lock_hold_seconds", sites):
    over = total - dict(buckets).get(0.001, 0)
    print("== lock %s: holds=%d over_1ms=%d longest<=%s" % (site, total, over, longest(buckets, total)))
PY
}
