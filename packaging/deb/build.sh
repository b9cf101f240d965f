#!/usr/bin/env bash
# Builds the Debian package of delayd from a built binary.
# Usage: packaging/deb/build.sh BINARY OUTDIR
#   BINARY: a `delayd` binary (release for shipping: cargo build --release -p delayd)
#   OUTDIR: where delayd_<version>_<arch>.deb is written (its path is printed)
# Environment: DEB_COMPRESSION (dpkg-deb -Z: xz, the default, gzip, none)
# and DEB_LEVEL (-z, default 6); the tests use gzip -1 on the large debug binary.
#
# The package installs /usr/bin/delayd, the systemd unit, a commented
# /etc/delayd/delayd.toml (a conffile: upgrades keep local edits) and the
# docs; postinst creates the `delayd` system user and /var/lib/delayd owned
# by it, and enables and starts the service where systemd runs.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BINARY OUTDIR" >&2
  exit 2
fi
binary="$1"
outdir="$2"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

# "delayd 0.1.0 (commit abc1234)" -> 0.1.0: the binary says what it is.
version="$("$binary" --version | awk '{print $2}')"
case "$version" in
  [0-9]*) ;;
  *) echo "$0: cannot read a version from '$binary --version'" >&2; exit 1 ;;
esac
arch="$(dpkg --print-architecture)"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
install -D -m 0755 "$binary" "$root/usr/bin/delayd"
install -D -m 0644 "$repo/packaging/systemd/delayd.service" "$root/lib/systemd/system/delayd.service"
install -D -m 0640 "$here/delayd.toml" "$root/etc/delayd/delayd.toml"
install -D -m 0644 "$repo/docs/operations.md" "$root/usr/share/doc/delayd/operations.md"
install -D -m 0644 "$repo/README.md" "$root/usr/share/doc/delayd/README.md"
cat >"$root/usr/share/doc/delayd/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: delayd

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT

install -d "$root/DEBIAN"
installed_kb="$(du -sk "$root" | cut -f1)"
cat >"$root/DEBIAN/control" <<CONTROL
Package: delayd
Version: $version
Architecture: $arch
Maintainer: delayd maintainers <delayd@localhost>
Section: net
Priority: optional
Installed-Size: $installed_kb
Depends: libc6, passwd
Description: durable delayed-message service
 delayd schedules messages for later delivery and delivers each once, on
 time: an HTTP API with leases, retries and dead letters, push delivery
 (webhooks), recurring schedules, the beanstalkd protocol, and an
 embedded fsynced store or Redis.
CONTROL
echo "/etc/delayd/delayd.toml" >"$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "$here/$script" "$root/DEBIAN/$script"
done

mkdir -p "$outdir"
deb="$outdir/delayd_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" -z"${DEB_LEVEL:-6}" --build "$root" "$deb" >/dev/null
echo "$deb"
