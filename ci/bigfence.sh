#!/usr/bin/env bash
# Stress: one big PMI fence across simulated nodes (fork launcher, release build), checked by
# gets (tests/programs/bigfence.c). Prints the wall time, the program's phase times, and for
# the front end and each NLA its peak RSS (VmHWM, from the launch report) next to the KVS
# data it held. Exit status: the job's.
#   ci/bigfence.sh [TOTAL_BYTES [NODES [GETS]]]        defaults: 300M 4 2000
# LIBI_NO_BUILD=1 skips the cargo build; extra libi-mpiexec options go in LIBI_ARGS
# (e.g. LIBI_ARGS="--kvs-push-max 1G" to push the whole fence down to every node).
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${1:-300M}
NODES=${2:-4}
GETS=${3:-2000}
[ -n "${LIBI_NO_BUILD:-}" ] || cargo build --release -q -p libi-mpiexec -p libi-nla
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/bigfence" tests/programs/bigfence.c
hosts=$(seq -f 'n%g:1' -s, 1 "$NODES")
# shellcheck disable=SC2086 # LIBI_ARGS is a list of options
set -- target/release/libi-mpiexec -launcher fork -hosts "$hosts" --report "$work/report.json" \
  ${LIBI_ARGS:-} -n "$NODES" "$work/bigfence" "$TOTAL" "$GETS"
cmd="$*"
echo "${cmd//$work/\$tmp}"
start=$(date +%s%N)
status=0
"$@" >"$work/out" || status=$?
end=$(date +%s%N)
grep '^bigfence:' "$work/out" || true
echo "status $status, wall $(( (end - start) / 1000000 )) ms"
if [ -s "$work/report.json" ]; then
  python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'process':<16} {'peak RSS MiB':>12} {'KVS held MiB':>12} {'RSS/KVS':>8}")
for n in r["reports"]:
    who = "front end" if n["node"] == 0 else f"NLA {n['host']}"
    rss = n.get("peak_rss_kib", 0) / 1024
    kvs = n["counters"].get("kvs_bytes", 0) / 2**20
    ratio = f"{rss / kvs:.2f}" if kvs >= 1 else "-"
    print(f"{who:<16} {rss:>12.1f} {kvs:>12.1f} {ratio:>8}")
PY
fi
exit "$status"
