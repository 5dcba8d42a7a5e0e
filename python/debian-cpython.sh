#!/usr/bin/env bash
# A CPython other than the machine's, from Debian's own packages, for testing the abi3 wheel
# on it: downloads the interpreter's packages of another Debian release (and that
# release's C library and the libraries its modules load), unpacks them into a folder, and
# points the interpreter at that C library (patchelf), so that it runs beside the system's
# without installing anything into it. Prints the interpreter's path.
#
#   bash python/debian-cpython.sh [SUITE VERSION [DIR]]     # default: trixie 3.13
#
# Only Debian's archive is needed (no python.org, no GitHub downloads). The packages of an
# unpacked release are kept in DIR (default target/debian-cpython/SUITE): a second call with
# a working interpreter there downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE="${1:-trixie}"
VERSION="${2:-3.13}"
DIR="${3:-target/debian-cpython/$SUITE}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
ROOT="$DIR/root"
PYTHON="$ROOT/usr/bin/python$VERSION"
LIBS="$ROOT/usr/lib/x86_64-linux-gnu"

if [ -x "$PYTHON" ] && "$PYTHON" -c "import ssl, ctypes, decimal, sqlite3, lzma, bz2, zlib" 2>/dev/null; then
    echo "$PYTHON"
    exit 0
fi

if [ "$(dpkg --print-architecture)" != amd64 ]; then
    echo "debian-cpython.sh: only amd64 is supported, this is $(dpkg --print-architecture)" >&2
    exit 1
fi
as_root=""
if [ "$(id -u)" -ne 0 ]; then as_root="sudo"; fi
if ! command -v patchelf >/dev/null 2>&1; then
    echo "== installing patchelf (Debian package)" >&2
    $as_root apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq patchelf >/dev/null
fi

# apt with its own sources, lists and cache under DIR: the system's apt is not touched. The
# release is checked against the Debian archive keys the system trusts (debian-archive-keyring
# carries the next releases' keys).
rm -rf "$DIR"
mkdir -p "$DIR/state/lists/partial" "$DIR/cache/archives/partial" "$DIR/debs" "$ROOT"
echo "deb http://deb.debian.org/debian $SUITE main" > "$DIR/sources.list"
apt_private=(
    -o "Dir::Etc::SourceList=$DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State=$DIR/state" -o Dir::State::status=/dev/null -o "Dir::Cache=$DIR/cache"
    -o APT::Architecture=amd64 -o Debug::NoLocking=1 -o APT::Sandbox::User=root
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false
)
echo "== Debian $SUITE: python$VERSION and the libraries it loads" >&2
timeout 600 apt-get "${apt_private[@]}" -qq update >&2

# The interpreter, its standard library, and every library it or its modules link against,
# from the same release (the interpreter needs that release's C library).
packages=(
    "python$VERSION-minimal" "libpython$VERSION-minimal" "libpython$VERSION-stdlib"
    libc6 libexpat1 zlib1g libssl3t64 libffi8 libbz2-1.0 liblzma5 libzstd1 libsqlite3-0
    libncursesw6 libtinfo6 libreadline8t64 libuuid1 libdb5.3t64 libmpdec4
)
(cd "$DIR/debs" && timeout 600 apt-get "${apt_private[@]}" -qq download "${packages[@]}" >&2)
for deb in "$DIR"/debs/*.deb; do
    dpkg-deb -x "$deb" "$ROOT"
done

# The interpreter loads the release's C library through the release's loader; RPATH (not
# RUNPATH) so that the extension modules it opens find the release's libraries too.
patchelf --set-interpreter "$LIBS/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$LIBS" "$PYTHON"
"$PYTHON" -c "import ssl, ctypes, decimal, sqlite3, lzma, bz2, zlib" >&2
rm -rf "$DIR/debs" "$DIR/cache" "$DIR/state"
echo "$PYTHON"
