#!/usr/bin/env bash
# The npm package's CI step: the WebAssembly built once in the release `wasm` profile (the size
# docs/performance.md reports; js/build.sh installs the wasm32 target and the wasm-bindgen CLI),
# the package's dependencies (`npm ci`), the types checked by tsc, then `node --test`: the
# machine, wire helpers, simulator and replay (against traces and numbers of the `rebound`
# binary the workspace's tests built), the fast-check properties, the example agents against
# `rebound serve`, and the outage playground in Debian's headless Chromium; then the binding
# as one of the drivers of tests/tests/drivers.rs.
#
# What waits on the network (Debian's Chromium, the npm packages) runs beside the build, which
# uses the CPU.
#
#   bash js/ci.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
export CARGO_TARGET_DIR="$TARGET_DIR"
export REBOUND_BIN="${REBOUND_BIN:-$TARGET_DIR/debug/rebound}"
[ -x "$REBOUND_BIN" ] || cargo build -p rebound-cli --quiet

as_root() {
  if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

LOGS="$TARGET_DIR/js-ci"
rm -rf "$LOGS"
mkdir -p "$LOGS"

browser() {
  if ! command -v chromium >/dev/null 2>&1; then
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
  fi
  chromium --version
}
( browser > "$LOGS/browser.log" 2>&1 ) &
browser_pid=$!
( cd js && npm ci --no-audit --no-fund > "$LOGS/npm.log" 2>&1 ) &
npm_pid=$!

# .ci/run builds the package beside the workspace's tests (REBOUND_JS_PREBUILT=1).
[ "${REBOUND_JS_PREBUILT:-0}" = 1 ] || bash js/build.sh
ls -l js/pkg/rebound_bg.wasm
echo "gzipped: $(gzip -9 -c js/pkg/rebound_bg.wasm | wc -c) bytes"

wait "$npm_pid" || { cat "$LOGS/npm.log"; exit 1; }
wait "$browser_pid" || { cat "$LOGS/browser.log"; exit 1; }
cat "$LOGS/browser.log"

cd js
npx tsc -p .
node --test test/
# The benches run (one short round each; their figures are docs/performance.md's, never
# asserted): a change that breaks them fails here, not when someone next measures.
node bench/overhead.mjs 1 --rounds 1 > /dev/null
node bench/size.mjs pkg/rebound_bg.wasm > /dev/null

# The binding as one of the drivers of tests/tests/drivers.rs: the worlds of tests/worlds.json
# through the TypeScript example agent's loop (js/drivers/world.ts), compared with the
# runner's.
npx tsc -p tsconfig.examples.json --outDir dist/driver
cd ..
REBOUND_JS_DRIVER="$PWD/js/dist/driver/drivers/world.js" REBOUND_REQUIRE_JS=1 \
  cargo test --workspace --quiet --test drivers -- the_javascript_binding
