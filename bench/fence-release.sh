#!/usr/bin/env bash
# Fence release latency of real fork-launcher runs: per fence, the time from the last rank's
# entry to the last rank's release (from the launch report's fence records), median over
# runs. One case per invocation:
#
#   bench/fence-release.sh K R [PUSH_MAX] -- PROGRAM ARGS...
#     K simulated hosts n1..nK, R ranks each, greedy tree; PUSH_MAX is --kvs-push-max
#     (default 1G: every fence pushed; 0: none)
#
#   FR_RUNS=7  runs; FR_WORK=/tmp/libi-fence-release  reports
#   CARGO_TARGET_DIR honoured (release binaries)
# Prints one line: the case, `uptime`'s load, and per fence epoch the median release
# latency in ms (and min-max).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
K=$1 R=$2
shift 2
PUSH=1G
if [ "${1:-}" != "--" ]; then PUSH=$1; shift; fi
[ "${1:-}" = "--" ] && shift
RUNS=${FR_RUNS:-7}
WORK=${FR_WORK:-/tmp/libi-fence-release}
TGT=${CARGO_TARGET_DIR:-$PWD/target}
LIBI=$TGT/release/libi-mpiexec
mkdir -p "$WORK"
hosts=$(seq -f "n%g:$R" 1 "$K" | paste -sd,)
n=$((K * R))
load=$(cut -d' ' -f1-3 /proc/loadavg)
reports=()
for ((i = 1; i <= RUNS; i++)); do
  rep=$WORK/r-$K-$R-$i.json
  rm -f "$rep"
  if ! MPIEXEC_TIMEOUT=300 "$LIBI" -launcher fork -hosts "$hosts" --tree greedy -n "$n" \
    --kvs-push-max "$PUSH" --report "$rep" "$@" >"$WORK/out" 2>"$WORK/err"; then
    echo "run $i failed: $(head -c 300 "$WORK/err")" >&2
    continue
  fi
  reports+=("$rep")
done
python3 - "$K" "$R" "$PUSH" "$load" "${reports[@]}" <<'PY'
import json, statistics, sys
k, r, push, load = sys.argv[1:5]
per = {}
for path in sys.argv[5:]:
    rep = json.load(open(path))
    f = {}
    for node in rep['reports']:
        for fr in node['fences']:
            e = f.setdefault(fr['epoch'], [0.0, 0.0])
            e[0] = max(e[0], fr['enter']); e[1] = max(e[1], fr['leave'])
    for ep, (ent, lv) in f.items():
        per.setdefault(ep, []).append((lv - ent) * 1000)
out = []
for ep in sorted(per):
    xs = per[ep]
    out.append(f"fence{ep} {statistics.median(xs):.1f} ms ({min(xs):.1f}-{max(xs):.1f})")
print(f"{k}x{r} push-max {push} runs {len(sys.argv) - 5} load {load}: " + "; ".join(out))
PY
