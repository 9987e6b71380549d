#!/usr/bin/env bash
# Fetches Debian's mpich source package (4.0.2) into target/mpich-testsuite (adding a deb-src
# entry for it if apt has none) and unpacks the parts of it that the tests read, keeping
# MPICH's paths under that directory:
#
#   ci/mpich-source.sh [PATTERN...]
#
# PATTERN: tar wildcards of the tarball's members, its leading mpich-X.Y.Z/ left out (default:
# 'src/pmi/*', MPICH's PMI headers and simple client, which the tests of libpmi.so and
# libpmi2.so parse for the API; ci/mpich-testsuite.sh passes 'test/mpi/*'). A pattern whose
# first directory is already unpacked is skipped. Nothing of MPICH is kept in this repository.
# ci/test.sh runs it before `cargo test`; the tests find the result at
# target/mpich-testsuite or at LIBI_MPICH_SRC.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$PWD/target/mpich-testsuite
[ $# -gt 0 ] || set -- 'src/pmi/*'
mkdir -p "$WORK"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! ls "$WORK"/mpich_*.orig.tar.* >/dev/null 2>&1; then
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "ci/mpich-source.sh: adding a deb-src entry for Debian's source packages"
    src=/etc/apt/sources.list.d/debian.sources
    [ -f "$src" ] || { echo "ci/mpich-source.sh: no $src to derive a deb-src entry from" >&2; exit 2; }
    sed 's/^Types: deb$/Types: deb-src/' "$src" | $SUDO tee /etc/apt/sources.list.d/libi-deb-src.sources >/dev/null
    $SUDO apt-get update -qq
  fi
  (cd "$WORK" && apt-get source --download-only -qq mpich 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
fi
tarball=$(ls "$WORK"/mpich_*.orig.tar.* 2>/dev/null | head -1)
[ -n "$tarball" ] || { echo "ci/mpich-source.sh: could not fetch Debian's mpich source package" >&2; exit 2; }
for p in "$@"; do
  top=${p%%/*}
  sub=${p%/\*}
  [ -d "$WORK/$sub" ] && continue
  echo "ci/mpich-source.sh: unpacking $p of $(basename "$tarball")"
  rm -rf "${WORK:?}/$sub"
  # Keep the timestamps (no -m): otherwise make wants to rerun automake.
  tar -xf "$tarball" -C "$WORK" --strip-components=1 --wildcards "*/$p"
  [ -d "$WORK/$top" ] || { echo "ci/mpich-source.sh: $p is not in $(basename "$tarball")" >&2; exit 2; }
done
