#!/usr/bin/env bash
# The Python package's CI step: fresh virtualenvs, the abi3 wheel built once from ./python
# (maturin from PyPI, in the dev profile and the workspace's target directory, so CI builds no
# second, optimised copy of core and sim; a user's `pip install ./python` builds the release
# profile that pyproject.toml names) and installed, then pytest
# on the machine's CPython and on CPython 3.13 (python/debian-cpython.sh): the machine's
# typed API and its hypothesis properties, the wire helpers, the simulator and replay against
# traces the Rust CLI records, and the example agents (httpx; the official SDKs) against
# `rebound serve`; and the binding as one of the drivers of tests/tests/drivers.rs.
#
# What waits on the network (the packages, Debian's CPython) runs beside what uses the CPU (the
# binding's lints, the wheel), and the two pytest runs, which mostly wait on the agents'
# outages, run beside each other and mypy (the first with two workers). Each of those prints
# its output when it ends.
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

LOGS="target/python-ci"
rm -rf "$LOGS"
mkdir -p "$LOGS"
# `start NAME COMMAND...` runs a command in the background, its output in $LOGS/NAME.log;
# `finish NAME` waits for it, prints that output, and fails when the command failed.
declare -A JOBS
start() {
  local name="$1"
  shift
  "$@" > "$LOGS/$name.log" 2>&1 &
  JOBS[$name]=$!
}
finish() {
  local name="$1" status=0
  wait "${JOBS[$name]}" || status=$?
  echo "== $name (exit $status)"
  cat "$LOGS/$name.log"
  return "$status"
}

# uv makes the virtualenvs and installs into them: the same packages as pip, in a second or two
# instead of half a minute of CPU.
UV="$(bash python/uv.sh)"

# The official SDKs of examples/agent_sdk.py, pinned (the versions tests/python/requirements.txt
# checks the fake server with): their exceptions and streaming responses are its contract.
SDKS=(anthropic==2.14.0 openai==3.57.0)
VENV="target/rebound-agent-venv"
VENV_OTHER="target/rebound-agent-venv-3.13"

# The machine's CPython.
venv_here() {
  rm -rf "$VENV"
  "$UV" venv --quiet --python "$(command -v "$PYTHON")" "$VENV"
  timeout 600 "$UV" pip install --quiet --python "$VENV/bin/python" \
    pytest pytest-xdist hypothesis httpx mypy "${SDKS[@]}"
}
# The same wheel on another CPython: 3.13 from Debian 13's packages (the machine has 3.11; the
# wheel is abi3 for 3.10 on).
venv_other() {
  local python_other
  python_other="$(bash python/debian-cpython.sh trixie 3.13)"
  rm -rf "$VENV_OTHER"
  "$UV" venv --quiet --python "$python_other" "$VENV_OTHER"
  timeout 600 "$UV" pip install --quiet --python "$VENV_OTHER/bin/python" \
    pytest hypothesis httpx "${SDKS[@]}"
}
start "venv-here" venv_here
start "venv-3.13" venv_other

# The binding's own Rust.
(cd python && cargo fmt --check && cargo clippy --quiet -- -D warnings)

# The abi3 wheel, built once (maturin from PyPI, dev profile, in the shared target directory)
# and installed in every interpreter's venv.
WHEELS="target/rebound-agent-wheel"
rm -rf "$WHEELS"
MATURIN_PEP517_ARGS="--profile dev" timeout 1800 "$UV" build --quiet --wheel \
  --out-dir "$WHEELS" python
WHEEL="$(ls "$WHEELS"/rebound_agent-*-abi3-*.whl)"

# The CLI the tests run (`rebound serve`, `rebound sim --trace-out`, `rebound run`, `rebound
# replay`): required, not skipped.
# The binary of the workspace's test build (in CI, the build the tests already made: a
# `cargo build -p rebound-cli` would build it again with other features).
cargo test --workspace --no-run --quiet
export REBOUND_BIN="$TARGET_DIR/debug/rebound"
export REBOUND_REQUIRE_CLI=1

finish "venv-here"
finish "venv-3.13"
"$UV" pip install --quiet --python "$VENV/bin/python" "$WHEEL"
"$UV" pip install --quiet --python "$VENV_OTHER/bin/python" "$WHEEL"

# The stubs and annotations hold: the installed package, the example agents and the bench.
mypy_check() {
  cd python && "../$VENV/bin/python" -m mypy --no-incremental rebound_agent examples/agent.py \
    examples/agent_sdk.py bench/machine_overhead.py
}
# Loopback only: no proxy, and no provider settings from the environment.
run_pytest() {
  local venv="$1"
  shift
  echo "== pytest on $("$venv/bin/python" -V)"
  cd python && NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost" \
    timeout 900 env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy \
    -u all_proxy -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL -u OPENAI_API_KEY -u OPENAI_BASE_URL \
    "../$venv/bin/pytest" -q -p no:cacheprovider "$@" tests
}
start "mypy" mypy_check
# Two pytest workers here (pytest-xdist): the suite waits on its agents more than it computes,
# and the slowest tests (the scripted outages) run on the machine's CPython only.
start "pytest-here" run_pytest "$VENV" -n 2
# On 3.13, the whole suite but the example agents' scenario matrices, which test the scenarios
# more than the interpreter (their agents still run here: the total outage, the file tools,
# the README commands and the two agents' same failures).
start "pytest-3.13" run_pytest "$VENV_OTHER" -k "not survives_the_scripted_outage and not random_outage"
# The Python binding as one of the drivers of tests/tests/drivers.rs: the scripted worlds of
# tests/worlds.json, its decisions against the runner's (the test build's binary: no build).
python_driver() {
  REBOUND_PYTHON="$PWD/$VENV/bin/python" REBOUND_REQUIRE_PYTHON=1 \
    cargo test --workspace --quiet --test drivers -- the_python_binding
}
start "python-driver" python_driver
status=0
for name in mypy pytest-here pytest-3.13 python-driver; do
  finish "$name" || status=1
done
exit "$status"
