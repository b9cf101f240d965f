# Helpers for the scripts that start their own `delayd serve`
# (soak.sh, fuzz-http-live.sh, http-bench.sh). Source it; it sets nothing.

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
