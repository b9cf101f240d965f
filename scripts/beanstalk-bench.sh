#!/usr/bin/env bash
# Throughput of delayd's beanstalkd listener end to end over TCP:
# pipelined puts, then reserve+delete, against the durable LocalBroker
# (default) or the in-memory reference broker.
#
# Usage: scripts/beanstalk-bench.sh [local|model] [jobs] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -q -p delayd-beanstalk --example bench -- "${1:-local}" "${2:-20000}" "${3:-8}"
