#!/usr/bin/env bash
# Installs the Restate server the durable tests run against: the official binary, from the npm
# package `@restatedev/restate-server` (pinned), into target/restate under the repository root.
# `durable/tests/support/restate.rs` runs this itself on first use, so `cargo test --workspace`
# needs nothing run before it; running it by hand is harmless.
#
#   bash durable/tests/support/install-restate.sh [DIR]
#
# DIR defaults to $REBOUND_RESTATE_DIR, else target/restate. Idempotent and safe to run
# concurrently (one run installs under a lock, the others wait and find it installed). Needs
# node and npm (the npm registry); about 30 s and 220 MB fresh. Prints the native binary's path
# last.
# Exit 3: npm could not install it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR="${1:-${REBOUND_RESTATE_DIR:-target/restate}}"
VERSION="1.7.12"

ready() {
  [ -x "$DIR/node_modules/.bin/restate-server" ] &&
    "$DIR/node_modules/.bin/restate-server" --version 2>/dev/null | grep -q "restate-server $VERSION"
}

mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9
if ! ready; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is not installed: cannot install @restatedev/restate-server" >&2
    exit 3
  fi
  if ! timeout 600 npm install --prefix "$DIR" --no-audit --no-fund --silent \
      "@restatedev/restate-server@$VERSION" >&2; then
    echo "npm could not install @restatedev/restate-server@$VERSION" >&2
    exit 3
  fi
  ready || { echo "restate-server $VERSION did not install into $DIR" >&2; exit 3; }
fi
# The native binary, not npm's `.bin` launcher: the launcher is a node process that spawns
# the server, so a SIGKILL of it (a test's crash, a drop) left the server running, orphaned.
native=( "$(cd "$DIR" && pwd)"/node_modules/@restatedev/restate-server-*/bin/restate-server )
[ -x "${native[0]}" ] || { echo "no native restate-server binary under $DIR" >&2; exit 3; }
echo "${native[0]}"
