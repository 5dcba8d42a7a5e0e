#!/usr/bin/env bash
# The real-client test: the official `anthropic`, `openai`, `google-genai` and `boto3` Python
# SDKs (pinned in requirements.txt, installed in a virtualenv under target/ by uv) against the
# fake provider server.
#
#   bash tests/python/run.sh
#
# Uses the `fake_server` example of the workspace's test build (`cargo test --workspace` builds
# the examples; in CI this is the build the tests already made), then runs test_fake_server.py
# with unittest.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
VENV="target/python-venv"
REQ="tests/python/requirements.txt"

if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$VENV/requirements.txt"; then
    # uv (python/uv.sh) makes the venv and installs into it, as python/ci.sh does.
    UV="$(bash python/uv.sh)"
    rm -rf "$VENV"
    "$UV" venv --quiet --python "$(command -v "$PYTHON")" "$VENV"
    timeout 600 "$UV" pip install --quiet --python "$VENV/bin/python" -r "$REQ"
    cp "$REQ" "$VENV/requirements.txt"
fi

cargo test --workspace --no-run --quiet
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
export REBOUND_FAKE_SERVER="$TARGET_DIR/debug/examples/fake_server"

# Loopback only: no proxy, and no provider settings from the environment.
for test in test_fake_server test_bedrock_client; do
    NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost" \
        timeout 600 env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy \
        -u all_proxy -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL -u ANTHROPIC_AUTH_TOKEN \
        -u OPENAI_API_KEY -u OPENAI_BASE_URL \
        -u GOOGLE_API_KEY -u GEMINI_API_KEY -u GOOGLE_GEMINI_BASE_URL -u GOOGLE_VERTEX_BASE_URL \
        -u GOOGLE_GENAI_USE_VERTEXAI -u GOOGLE_GENAI_USE_ENTERPRISE -u GOOGLE_GENAI_API_VERSION \
        -u GOOGLE_GENAI_HTTP_CLIENT -u GOOGLE_CLOUD_PROJECT -u GOOGLE_CLOUD_LOCATION \
        -u GOOGLE_APPLICATION_CREDENTIALS -u GOOGLE_API_USE_CLIENT_CERTIFICATE \
        -u GOOGLE_API_USE_MTLS_ENDPOINT -u AWS_PROFILE -u AWS_CONFIG_FILE \
        -u AWS_SHARED_CREDENTIALS_FILE -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
        -u AWS_SESSION_TOKEN -u AWS_BEARER_TOKEN_BEDROCK -u AWS_ENDPOINT_URL \
        "$VENV/bin/python" "tests/python/$test.py" -v
done
