#!/usr/bin/env bash
# The Python package's CI step: a fresh virtualenv, the abi3 wheel built once from ./python
# (maturin from PyPI, in the dev profile and the workspace's target directory, so CI builds no
# second, optimised copy of core and sim; a user's `pip install ./python` builds the release
# profile that pyproject.toml names) and installed, then pytest
# on the machine's CPython and on CPython 3.13 (python/debian-cpython.sh): the machine's
# typed API and its hypothesis properties, the wire helpers, the simulator and replay against
# traces the Rust CLI records, and the example agents (httpx; the official SDKs) against
# `rebound serve`.
#
#   bash python/ci.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

# One target directory for the binding and the workspace: the binding is a Cargo workspace of
# its own (so the root's fmt and clippy skip it), but what it shares with the root's build
# (core, sim, serde...) is built once.
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
export CARGO_TARGET_DIR="$TARGET_DIR"

# The binding's own Rust.
(cd python && cargo fmt --check && cargo clippy --quiet -- -D warnings)

VENV="target/rebound-agent-venv"

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# The official SDKs of examples/agent_sdk.py, pinned (the versions tests/python/requirements.txt
# checks the fake server with): their exceptions and streaming responses are its contract.
SDKS="anthropic==2.14.0 openai==3.57.0"
# shellcheck disable=SC2086
timeout 600 "$VENV/bin/pip" install --quiet --disable-pip-version-check pytest hypothesis httpx mypy $SDKS
# The abi3 wheel, built once (maturin from PyPI, dev profile, in the shared target directory)
# and installed in every interpreter's venv.
WHEELS="target/rebound-agent-wheel"
rm -rf "$WHEELS"
MATURIN_PEP517_ARGS="--profile dev" timeout 1800 "$VENV/bin/pip" wheel --quiet \
    --disable-pip-version-check --no-deps -w "$WHEELS" ./python
WHEEL="$(ls "$WHEELS"/rebound_agent-*-abi3-*.whl)"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$WHEEL"

# The stubs and annotations hold: the installed package, the example agents and the bench.
(cd python && "../$VENV/bin/python" -m mypy --no-incremental rebound_agent examples/agent.py \
    examples/agent_sdk.py bench/machine_overhead.py)

# The CLI the tests run (`rebound serve`, `rebound sim --trace-out`, `rebound run`, `rebound
# replay`): required, not skipped.
# The binary of the workspace's test build (in CI, the build the tests already made: a
# `cargo build -p rebound-cli` would build it again with other features).
cargo test --workspace --no-run --quiet
export REBOUND_BIN="$TARGET_DIR/debug/rebound"
export REBOUND_REQUIRE_CLI=1

# Loopback only: no proxy, and no provider settings from the environment.
run_pytest() {
    local venv="$1"
    shift
    (cd python && NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost" \
        timeout 900 env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy \
        -u all_proxy -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL -u OPENAI_API_KEY -u OPENAI_BASE_URL \
        "../$venv/bin/pytest" -q -p no:cacheprovider "$@" tests)
}
echo "== pytest on $("$VENV/bin/python" -V)"
run_pytest "$VENV"

# The same wheel on another CPython: 3.13 from Debian 13's packages (the machine has 3.11; the
# wheel is abi3 for 3.10 on). The whole suite but the example agents' scenario matrices,
# which test the scenarios more than the interpreter (their agents still run here: the total
# outage, the file tools, the README commands and the two agents' same failures).
PYTHON_OTHER="$(bash python/debian-cpython.sh trixie 3.13)"
VENV_OTHER="target/rebound-agent-venv-3.13"
rm -rf "$VENV_OTHER"
"$PYTHON_OTHER" -m venv --without-pip "$VENV_OTHER"
# shellcheck disable=SC2086
timeout 600 "$VENV/bin/pip" --python "$VENV_OTHER/bin/python" install --quiet \
    --disable-pip-version-check pytest hypothesis httpx $SDKS "$WHEEL"
echo "== pytest on $("$VENV_OTHER/bin/python" -V)"
run_pytest "$VENV_OTHER" -k "not survives_the_scripted_outage and not random_outage"
