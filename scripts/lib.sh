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
