#!/usr/bin/env bash
# The Python package's CI step (#39): a fresh virtualenv, `pip install ./python` (maturin from
# PyPI builds the abi3 wheel, release profile, into python/target), then pytest: the machine's
# typed API and its hypothesis properties, the wire helpers, the simulator and replay against
# traces the Rust CLI records, and the example agent against `rebound serve`.
#
#   bash python/ci.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

# The binding's own Rust (its own Cargo workspace, so the root's fmt and clippy skip it).
(cd python && cargo fmt --check && cargo clippy --release --quiet -- -D warnings)

VENV="target/rebound-agent-venv"

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
timeout 600 "$VENV/bin/pip" install --quiet --disable-pip-version-check pytest hypothesis httpx mypy
timeout 1800 "$VENV/bin/pip" install --quiet --disable-pip-version-check ./python

# The stubs and annotations hold: the installed package, the example agent and the bench.
(cd python && "../$VENV/bin/python" -m mypy --no-incremental rebound_agent examples/agent.py bench/machine_overhead.py)

# The CLI the tests run (`rebound serve`, `rebound sim --trace-out`, `rebound run`, `rebound
# replay`): required, not skipped.
cargo build --quiet -p rebound-cli
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
export REBOUND_BIN="$TARGET_DIR/debug/rebound"
export REBOUND_REQUIRE_CLI=1

# Loopback only: no proxy, and no provider settings from the environment.
cd python
NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost" \
    timeout 900 env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy \
    -u all_proxy -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL -u OPENAI_API_KEY -u OPENAI_BASE_URL \
    "../$VENV/bin/pytest" -q -p no:cacheprovider tests
