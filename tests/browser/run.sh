#!/usr/bin/env bash
# Browser tests of the dashboard: installs what is missing (Chromium from
# Debian, playwright-core from npm), starts a server, runs `node --test`.
#
#   tests/browser/run.sh
#
# DELAYD_SERVE_CMD: the command that starts the server; `{addr}` is
#   replaced by the address to listen on and `{token}` by a bearer token
#   (when the command has no `{token}`, the token tests are skipped), and
#   `{token_file}` by a `--token-file` with two scoped tokens, a read-only
#   `viewer` (read:ui-e2e-*) and an `admin` (*:*), whose secrets the tests
#   get in DELAYD_VIEWER_TOKEN and DELAYD_ADMIN_TOKEN (without
#   `{token_file}`, the scoped-token tests are skipped).
#   Default: `delayd serve` (built by cargo) on a fresh data directory. The
#   command runs under `bash -c`; scripts/test passes the binary it built.
# DELAYD_TOKEN: with DELAYD_URL, the token that server needs (and
#   DELAYD_VIEWER_TOKEN, DELAYD_ADMIN_TOKEN: its scoped tokens, as above).
# DELAYD_URL: test an already running server instead (nothing is started).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
step=""
server_pid=""
log="$(mktemp -t delayd-browser-server.XXXXXX.log)"

fail() {
  echo "browser tests: FAILED while: $step" >&2
  if [[ -s "$log" ]]; then
    echo "---- server log (last 40 lines): $log" >&2
    tail -n 40 "$log" >&2
  fi
}
cleanup() {
  [[ -n "${token_file:-}" ]] && rm -f "$token_file"
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap 'fail' ERR
trap 'cleanup' EXIT

step="installing Chromium (apt-get install chromium chromium-driver)"
if [[ ! -x /usr/bin/chromium ]]; then
  sudo_cmd=""
  [[ "$(id -u)" != 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y chromium chromium-driver \
    || { $sudo_cmd apt-get update && $sudo_cmd apt-get install -y chromium chromium-driver; }
fi

step="installing playwright-core (npm ci in tests/browser)"
if [[ ! -d "$here/node_modules/playwright-core" ]]; then
  (cd "$here" && if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi)
fi

mkdir -p "$root/artifacts/screenshots" "$root/docs/img"

if [[ -z "${DELAYD_URL:-}" ]]; then
  step="finding a free port"
  port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  addr="127.0.0.1:$port"
  token="browser-test-$RANDOM$RANDOM"
  default_cmd='cargo run --quiet -p delayd -- serve --http {addr} --beanstalk off --data "$(mktemp -d)" --token {token} --token-file {token_file}'
  cmd="${DELAYD_SERVE_CMD:-$default_cmd}"
  if [[ "$cmd" == *"{token}"* ]]; then export DELAYD_TOKEN="$token"; else unset DELAYD_TOKEN; fi
  if [[ "$cmd" == *"{token_file}"* ]]; then
    step="writing the scoped token file"
    token_file="$(mktemp -t delayd-browser-tokens.XXXXXX.toml)"
    export DELAYD_VIEWER_TOKEN="viewer-$RANDOM$RANDOM" DELAYD_ADMIN_TOKEN="admin-$RANDOM$RANDOM"
    sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
    cat >"$token_file" <<TOML
[[token]]
name = "viewer"
sha256 = "$(sha "$DELAYD_VIEWER_TOKEN")"
scopes = ["read:ui-e2e-*"]

[[token]]
name = "admin"
sha256 = "$(sha "$DELAYD_ADMIN_TOKEN")"
scopes = ["*:*"]
TOML
    cmd="${cmd//'{token_file}'/$token_file}"
  else
    unset DELAYD_VIEWER_TOKEN DELAYD_ADMIN_TOKEN
  fi
  cmd="${cmd//'{addr}'/$addr}"
  cmd="${cmd//'{token}'/$token}"
  export DELAYD_URL="http://$addr"

  step="starting the server: $cmd"
  echo "browser tests: starting server: $cmd (log: $log)"
  (cd "$root" && exec bash -c "exec $cmd") >"$log" 2>&1 &
  server_pid=$!

  step="waiting for $DELAYD_URL/healthz (server: $cmd)"
  # Generous: the default command may have to compile first.
  for _ in $(seq 1 600); do
    if curl -fsS "$DELAYD_URL/healthz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "browser tests: the server exited before answering" >&2
      false
    fi
    sleep 0.5
  done
  curl -fsS "$DELAYD_URL/healthz" >/dev/null
fi

step="running node --test against $DELAYD_URL (screenshots: artifacts/screenshots/)"
cd "$here"
node --test --test-concurrency=1 --test-reporter=spec dashboard.test.mjs
echo "browser tests: passed (screenshots in $root/artifacts/screenshots/)"
