#!/usr/bin/env bash
# Throughput of the LIBI member collectives (broadcast, scatter, gather) at 1 MiB and
# 64 MiB, on one node (2 members) and on 4 simulated nodes (fork launcher, hosts n1..n4, one
# member each): bench/libi_coll.c, built against the release liblibi.so. Prints a markdown
# table (bench/results.md, "LIBI collectives", has the measurements). Not part of CI.
#
#   bench/libi-coll.sh                  build (release) and run every case
#   LIBI_COLL_NOBUILD=1 bench/...       use the release binaries as they are
#   LIBI_COLL_TARGET=DIR bench/...      use liblibi.so, libi-mpiexec, libi-nla from DIR (an
#                                       older build, to compare; nothing is built)
#   LIBI_COLL_SIZES=1,16,64             other sizes (MiB); LIBI_COLL_ITERS=N iterations
#   LIBI_COLL_CONFIGS="localhost:2 n1,n2,n3,n4"   other host lists
#
# A size is the master's buffer: the broadcast's payload, the scatter's send buffer, the
# gather's receive buffer (size / members each). MB/s = that many bytes / time per op.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
T=${LIBI_COLL_TARGET:-${CARGO_TARGET_DIR:-target}/release}
if [ -z "${LIBI_COLL_NOBUILD:-}${LIBI_COLL_TARGET:-}" ]; then
  cargo build --release -q -p libi-capi -p libi-mpiexec -p libi-nla
fi
T=$(cd "$T" && pwd)
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
cc -O2 -Wall -Werror -o "$BIN/libi_coll" bench/libi_coll.c -I session/include \
  -L"$T" -Wl,-rpath,"$T" -llibi
export LIBI_MPIEXEC="$T/libi-mpiexec" LIBI_MPIEXEC_ARGS="-launcher fork"
SIZES=${LIBI_COLL_SIZES:-1,64}
CONFIGS=${LIBI_COLL_CONFIGS:-"localhost:2 n1,n2,n3,n4"}
echo "| hosts | members | op | MiB | iterations | ms/op | MB/s |"
echo "|---|---|---|---:|---:|---:|---:|"
for hosts in $CONFIGS; do
  members=0
  IFS=, read -ra hs <<<"$hosts"
  for h in "${hs[@]}"; do
    case $h in *:*) members=$((members + ${h##*:})) ;; *) members=$((members + 1)) ;; esac
  done
  out=$("$BIN/libi_coll" "$hosts" "$SIZES")
  errors=$(awk '$1 == "errors" { print $2 }' <<<"$out")
  if [ "$errors" != 0 ]; then
    echo "libi-coll: $errors wrong bytes on $hosts" >&2
    exit 1
  fi
  awk -v h="$hosts" -v m="$members" '$1 != "errors" {
    printf "| %s | %d | %s | %s | %s | %s | %s |\n", h, m, $1, $2, $3, $4, $5 }' <<<"$out"
done
