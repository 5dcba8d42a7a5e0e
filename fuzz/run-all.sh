#!/usr/bin/env bash
# Fuzz every target for SECONDS (default 600) each, one after the other, one job each.
#
#   fuzz/run-all.sh [SECONDS] [OUT]
#
# Builds every target once and copies the binaries to OUT/bin (default: fuzz/out), so editing
# the tree while it runs cannot trigger a rebuild between targets. New inputs go to
# OUT/corpus/<target> (the committed seed corpus in corpus/<target> is read, never written),
# crashes to OUT/artifacts/<target>/, each target's libFuzzer log to OUT/<target>.log, and one
# line per target with its executions to stdout. Exits non-zero if any target found a crash.
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain, or the stable one
# with RUSTC_BOOTSTRAP=1 (TOOLCHAIN=stable).
set -uo pipefail
cd "$(dirname "$0")"
secs="${1:-600}"
out="$(mkdir -p "${2:-out}" && cd "${2:-out}" && pwd)"
toolchain="${TOOLCHAIN:-nightly}"
if [ "$toolchain" = stable ]; then
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
else
  fuzz=(cargo "+$toolchain" fuzz)
fi
git rev-parse HEAD > "$out/commit" 2>/dev/null || true
"${fuzz[@]}" build -s none > "$out/build.log" 2>&1 || { echo "build failed: $out/build.log"; exit 1; }
triple="$(rustc -vV | sed -n 's/^host: //p')"
mkdir -p "$out/bin"
targets=$("${fuzz[@]}" list)
for t in $targets; do
  cp "target/$triple/release/$t" "$out/bin/$t"
done
status=0
for t in $targets; do
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  started=$(date -u +%T)
  "$out/bin/$t" "$out/corpus/$t" "corpus/$t" -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t/" > "$out/$t.log" 2>&1
  code=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1)
  echo "$t: started $started, exit $code, ${runs:-?} executions in ${secs} s, $cov, $(ls "$out/artifacts/$t" | wc -l) artifacts"
  [ "$code" -eq 0 ] || status=1
done
exit $status
