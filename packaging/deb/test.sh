#!/usr/bin/env bash
# Builds the Debian package from the debug binary cargo built (no release
# build: too slow for CI), checks its metadata, contents and maintainer
# scripts, unpacks it into a scratch root, runs `delayd --version` from
# there and serves briefly with the packaged config file.
# Usage: packaging/deb/test.sh [BINARY]   (default <target>/debug/delayd)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

target_dir="${CARGO_TARGET_DIR:-target}"
binary="${1:-$target_dir/debug/delayd}"
[ -x "$binary" ] || { echo "packaging/deb/test.sh: no delayd binary at $binary (cargo build -p delayd)" >&2; exit 1; }
scratch="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "packaging/deb/test.sh: $*" >&2; exit 1; }

# gzip -1: the debug binary is ~200 MB; xz would take a minute.
deb="$(DEB_COMPRESSION=gzip DEB_LEVEL=1 packaging/deb/build.sh "$binary" "$scratch/out")"
[ -f "$deb" ] || fail "no package at $deb"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
[ "$(dpkg-deb -f "$deb" Package)" = delayd ] || fail "Package field"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version is not the workspace's $version"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture field"

contents="$(dpkg-deb -c "$deb")"
for path in ./usr/bin/delayd ./lib/systemd/system/delayd.service ./etc/delayd/delayd.toml \
            ./usr/share/doc/delayd/copyright ./usr/share/doc/delayd/operations.md; do
  grep -q " $path\$" <<<"$contents" || fail "$path is not in the package"
done
grep -q '^-rwxr-xr-x root/root .* ./usr/bin/delayd$' <<<"$contents" || fail "delayd is not root-owned 0755"

dpkg-deb -e "$deb" "$scratch/control"
grep -qx /etc/delayd/delayd.toml "$scratch/control/conffiles" || fail "the config is not a conffile"
for script in postinst prerm postrm; do
  [ -x "$scratch/control/$script" ] || fail "$script missing or not executable"
  sh -n "$scratch/control/$script" || fail "$script does not parse"
done
grep -q 'useradd --system' "$scratch/control/postinst" || fail "postinst creates no system user"
grep -q 'install -d -o delayd -g delayd -m 0750 /var/lib/delayd' "$scratch/control/postinst" \
  || fail "postinst does not create the data directory owned by delayd"

root="$scratch/root"
dpkg-deb -x "$deb" "$root"
out="$("$root/usr/bin/delayd" --version)"
[[ "$out" =~ ^delayd\ $version\ \(commit\ ([0-9a-f]{7,}|unknown),\ tzdata\ [0-9]{4}[a-z]\)$ ]] || fail "--version printed '$out'"
if head="$(git rev-parse --short HEAD 2>/dev/null)"; then
  [[ "$out" == *"(commit $head)" ]] || echo "note: binary built at another commit than HEAD ($out, HEAD $head)" >&2
fi

# The unit points at the packaged paths; systemd accepts it (with the
# binary path swapped for the unpacked one).
unit="$root/lib/systemd/system/delayd.service"
grep -qx 'ExecStart=/usr/bin/delayd serve --config /etc/delayd/delayd.toml' "$unit" || fail "ExecStart"
grep -qx 'StateDirectory=delayd' "$unit" || fail "StateDirectory"
if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s|/usr/bin/delayd|$root/usr/bin/delayd|" "$unit" >"$scratch/delayd.service"
  verify="$(systemd-analyze verify "$scratch/delayd.service" 2>&1 || true)"
  if grep -v -e 'delayd.service:.*User' -e '^$' <<<"$verify" | grep -q .; then
    fail "systemd-analyze verify: $verify"
  fi
fi

# Every key of the packaged config (set or commented) is a serve option.
help="$("$root/usr/bin/delayd" serve --help)"
for key in $(sed -n 's/^#\{0,1\} \{0,1\}\([a-z_]*\) = .*/\1/p' "$root/etc/delayd/delayd.toml"); do
  grep -q -- "--${key//_/-}\b" <<<"$help" || fail "config key $key is not a serve option"
done
# The packaged config as it is serves (flags override its data dir and port).
port="$(free_port)"
"$root/usr/bin/delayd" serve --config "$root/etc/delayd/delayd.toml" --data "$scratch/data" \
  --http "127.0.0.1:$port" --beanstalk off >"$scratch/serve.log" 2>&1 &
server_pid=$!
wait_healthy "$port" "$server_pid" || fail "serve with the packaged config: $(tail -5 "$scratch/serve.log")"
kill -TERM "$server_pid"
wait "$server_pid" || fail "serve did not exit 0 on SIGTERM"
server_pid=""
echo "packaging/deb/test.sh: ok ($(du -h "$deb" | cut -f1) $deb)"
