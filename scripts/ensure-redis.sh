#!/usr/bin/env bash
# Installs redis-server and redis-cli when missing (tests of crates/redis
# spawn their own servers on free ports; they never use a running one).
# Idempotent and quiet: does nothing when both binaries are already there.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq redis-server >/dev/null

# The package starts a system service on 6379 on some images; delayd's tests
# never use it, and it is left as the package configured it.
command -v redis-server >/dev/null
command -v redis-cli >/dev/null
