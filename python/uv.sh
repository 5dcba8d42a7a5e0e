#!/usr/bin/env bash
# Prints the path of uv (https://docs.astral.sh/uv/), which the Python scripts make their
# virtualenvs and install with: the one on PATH, or else one installed from PyPI into
# target/uv-venv (once; about five seconds).
#
#   UV="$(bash python/uv.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v uv >/dev/null 2>&1; then
  command -v uv
  exit 0
fi
PYTHON="${PYTHON:-python3}"
VENV="$PWD/target/uv-venv"
mkdir -p target
# One install at a time (the tests and the Python scripts may ask at once).
exec 9>"$VENV.lock"
flock 9
if [ ! -x "$VENV/bin/uv" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >&2
  timeout 600 "$VENV/bin/pip" install --quiet --disable-pip-version-check uv >&2
fi
echo "$VENV/bin/uv"
