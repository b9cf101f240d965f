#!/usr/bin/env bash
# Installs the external programs the test suite talks to, when missing:
# redis-server/redis-cli (RedisBroker tests), the Python beanstalkd client
# greenstalk (interoperability test), Python's venv module, dpkg-deb,
# openssl and beanstalkd itself (the binlog import test).
# Idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if [ -f scripts/ensure-redis.sh ]; then
  bash scripts/ensure-redis.sh
elif ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi

# The Python client's tests make a virtualenv (scripts/test-python); the
# Debian package test needs dpkg-deb.
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_install python3-venv
fi
if ! command -v dpkg-deb >/dev/null 2>&1; then
  apt_install dpkg
fi
# The Python client's TLS test makes its certificate with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi

# `delayd import beanstalkd-binlog`'s test runs a real beanstalkd 1.12 on
# a port of its own. The package enables a service on 11300: stop it if it
# started.
if ! command -v beanstalkd >/dev/null 2>&1; then
  apt_install beanstalkd
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl stop beanstalkd >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    service beanstalkd stop >/dev/null 2>&1 || true
  fi
fi

if ! python3 -c 'import greenstalk' >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check greenstalk
fi
