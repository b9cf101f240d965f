#!/usr/bin/env bash
# Schemathesis against a live release `delayd serve` (own free port,
# temporary data directory, a bearer token): property-based requests
# generated from the served /openapi.json, stateful sequences included,
# for SECONDS (default 180).
#
# Checks: no 5xx, every status and body as the document says
# (status_code, content_type, response_headers, response_schema
# conformance), the token enforced (ignored_auth), deleted resources stay
# gone (use_after_free), created ones are there (ensure_resource_
# availability), unsupported methods refused. Not checked: that every
# request the schema allows is accepted and every one it forbids refused
# (positive_data_acceptance, negative_data_rejection): the document does
# not encode the cross-field rules api.md states (delay_ms or deliver_at,
# `to` after `from`, ...), see docs/robustness.md. The run also fails when
# the server's log shows a panic.
#
# One worker: with two, schemathesis 4.32 sometimes fails on its own
# ("AST constructor recursion depth mismatch", a Runtime Error of the tool).
# A lease call may wait up to 60 s by contract (`wait_ms`), hence the 70 s
# request timeout.
#
# Schemathesis is installed from PyPI into a virtualenv ($VENV, default
# target/schemathesis-venv) on first use.
#
# Usage: scripts/fuzz-http-live.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
seconds="${1:-${SECONDS_BUDGET:-180}}"
target="${CARGO_TARGET_DIR:-target}"
venv="${VENV:-$target/schemathesis-venv}"
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check schemathesis
fi

cargo build --release -q -p delayd
port=$(free_port)
data="$(mktemp -d)"
log="$(mktemp)"
token="fuzz-$RANDOM$RANDOM"
"$target/release/delayd" serve --http "127.0.0.1:$port" --beanstalk off \
  --data "$data" --token "$token" 2>"$log" &
pid=$!
cleanup() {
  kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$log"
}
trap cleanup EXIT
wait_healthy "$port" "$pid"

status=0
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" \
  -H "Authorization: Bearer $token" --max-time "$seconds" --workers 1 \
  --request-timeout 70 \
  -c not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,ignored_auth,use_after_free,ensure_resource_availability,unsupported_method \
  || status=$?
if grep -q "panicked" "$log"; then
  echo "FAIL: the server panicked:"
  grep -A2 "panicked" "$log" | head -20
  exit 1
fi
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died"; tail -20 "$log"; exit 1; }
exit "$status"
