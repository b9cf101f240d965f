#!/usr/bin/env bash
# Coverage-guided fuzzing of the beanstalkd parser and decoder (libFuzzer,
# target fuzz/fuzz_targets/parse.rs) for a bounded time.
#
# Builds the target the way `cargo fuzz run parse` does (sanitizer-coverage
# instrumentation, AddressSanitizer, debug assertions, `--cfg fuzzing`) but
# with plain cargo, so cargo-fuzz need not be installed; RUSTC_BOOTSTRAP=1
# lets the stable toolchain accept the one nightly flag (-Zsanitizer).
# libfuzzer-sys compiles libFuzzer itself, which needs a C++ compiler.
#
# The corpus persists in fuzz/corpus/parse (seeded from valid commands),
# crashes land in fuzz/artifacts/parse. Prints libFuzzer's final stats
# (number_of_executed_units, ...); exits non-zero on a crash.
#
# Usage: scripts/fuzz.sh [SECONDS]   (default 60; FUZZ_JOBS for parallel
#        workers, default 1 on a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-${FUZZ_SECONDS:-60}}"
jobs="${FUZZ_JOBS:-1}"
target="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="${CARGO_TARGET_DIR:-target}/fuzz"

flags=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  -Cllvm-args=-simplifycfg-branch-fold-threshold=0
  -Zsanitizer=address
  -Cdebug-assertions
  -Coverflow-checks
  --cfg fuzzing
)
# --target keeps the flags off build scripts and proc macros.
RUSTC_BOOTSTRAP=1 RUSTFLAGS="${flags[*]}" \
  cargo build --quiet --release --manifest-path fuzz/Cargo.toml \
  --target "$target" --target-dir "$target_dir" --bin parse
bin="$target_dir/$target/release/parse"

corpus=fuzz/corpus/parse
artifacts=fuzz/artifacts/parse
mkdir -p "$corpus" "$artifacts"
if [ -z "$(ls -A "$corpus")" ]; then
  i=0
  for seed in 'put 1 0 10 5\r\nhello\r\n' 'reserve\r\n' 'reserve-with-timeout 5\r\n' \
      'use jobs\r\n' 'watch a\r\n' 'ignore default\r\n' 'delete 1\r\n' \
      'release 1 2 3\r\n' 'bury 1 2\r\n' 'touch 1\r\n' 'peek 1\r\n' 'peek-ready\r\n' \
      'kick 10\r\n' 'kick-job 1\r\n' 'stats-job 1\r\n' 'stats-tube default\r\n' \
      'list-tubes\r\n' 'pause-tube a 10\r\n' 'put 1 0 10 70000\r\n' 'quit\r\n'; do
    printf "$seed" >"$corpus/seed-$i"
    i=$((i + 1))
  done
fi

echo "fuzzing parse for ${seconds}s (jobs=$jobs), corpus $(ls "$corpus" | wc -l) inputs"
# -max_len covers a line plus a body past the decoder's 16-byte test limit.
# With -jobs libFuzzer writes each worker's output to fuzz-N.log in the
# current directory: run from the corpus's parent and clean up after.
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
log="$(mktemp)"
status=0
"$bin" "$corpus" -artifact_prefix="$artifacts/" -max_total_time="$seconds" \
  -max_len=4096 -print_final_stats=1 "${parallel[@]}" >"$log" 2>&1 || status=$?
cat fuzz-*.log >>"$log" 2>/dev/null && rm -f fuzz-*.log
grep -E '^(stat::|Done [0-9]+ runs|==[0-9]+==|SUMMARY|INFO: Running)|panicked|deadly' "$log" || true
rm -f "$log"
if [ -n "$(ls -A "$artifacts")" ]; then
  echo "crash inputs in $artifacts:" && ls "$artifacts"
  exit 1
fi
exit "$status"
