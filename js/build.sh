#!/usr/bin/env bash
# Builds the npm package's WebAssembly: rebound-js for wasm32-unknown-unknown (profile
# `wasm`: small, one codegen unit, LTO), then its JavaScript bindings with the wasm-bindgen
# CLI of exactly the crate's version, into js/pkg/ (generated; not committed). One build
# loads in Node (ESM), Deno and browsers: lib/load.js hands the bytes to the bindings.
#
# Installs what it needs and is missing: the wasm32-unknown-unknown target (rustup) and the
# wasm-bindgen CLI (crates.io, into $CARGO_TARGET_DIR/tools, only its `wasm-bindgen` binary
# and without TLS, which only its test runner's downloads use; $WASM_BINDGEN names another).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
jobs=${CARGO_BUILD_JOBS:-2}

# The CLI's version must be the crate's, which js/Cargo.toml pins ("=0.2.N").
version=$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' "$here/Cargo.toml")
[ -n "$version" ] || { echo "js/build.sh: no pinned wasm-bindgen version in js/Cargo.toml" >&2; exit 1; }

if ! rustc --print target-libdir --target wasm32-unknown-unknown >/dev/null 2>&1 ||
   [ ! -d "$(rustc --print target-libdir --target wasm32-unknown-unknown)" ]; then
  rustup target add wasm32-unknown-unknown
fi

tools=$target_dir/tools
bindgen=${WASM_BINDGEN:-$tools/bin/wasm-bindgen}
if ! "$bindgen" --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
  cargo install wasm-bindgen-cli --version "$version" --no-default-features \
    --bin wasm-bindgen --root "$tools" -j "$jobs" --quiet
fi

# REBOUND_WASM_PROFILE=dev builds in seconds what `wasm` builds small (for working on it).
profile=${REBOUND_WASM_PROFILE:-wasm}
cargo build -p rebound-js --target wasm32-unknown-unknown --profile "$profile" -j "$jobs" \
  --manifest-path "$root/Cargo.toml" --quiet
out=$profile
[ "$profile" = dev ] && out=debug
rm -rf "$here/pkg"
"$bindgen" --target web --weak-refs --remove-name-section --remove-producers-section \
  --out-dir "$here/pkg" --out-name rebound \
  "$target_dir/wasm32-unknown-unknown/$out/rebound_js.wasm"
