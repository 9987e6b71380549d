#!/usr/bin/env bash
# Measurements the simulator (libi-sim) is validated against: real fork-launcher runs of
# tests/programs/pmi_replay.c replaying sim/workloads/mpich4-init.pmitrace (MPICH 4's
# MPI_Init/MPI_Finalize conversation) at K agents x R ranks per agent, every agent a
# simulated host n1..nK on this machine, greedy tree. Each run writes a launch report
# (--report); per case the median of the runs is kept. Not part of CI (heavy: the 64 x 64
# case is 4096 ranks plus 64 agents on this machine).
#
#   bench/sim-validate.sh                      all cases, 5 runs each
#   SIMV_AGENTS="4 16" SIMV_PPN="1 16" bench/sim-validate.sh
#
# Writes $SIMV_OUT (default bench/data/sim-validate.json) and prints a table. Per case:
#   launch_s          report.launch_time: front end start -> every agent connected
#   first_fence_in_s  the last rank entered the first fence (every rank started and did its
#                     first requests)
#   first_fence_s     the last rank left the first fence (first fence complete)
#   fences_s          completion time of each fence (last rank out), in order
#   total_s           report.total_time: front end start -> job ended
#   wall_s            the whole libi-mpiexec process, measured outside it
# All values are medians over the runs, in seconds from the front end's start (wall: from
# fork to exit). The raw reports stay in $SIMV_WORK (out of git); the JSON names them.
#
# Environment:
#   SIMV_RUNS=5           runs per case
#   SIMV_AGENTS="4 16 64" agents (simulated hosts)
#   SIMV_PPN="1 16 64"    ranks per agent
#   SIMV_TREE=greedy      launch tree shape
#   SIMV_PUSH=16M         --kvs-push-max of the runs (libi-mpiexec's default), recorded in the
#                         JSON so that the simulator is run with the same
#   SIMV_TRACE            workload (default sim/workloads/mpich4-init.pmitrace)
#   SIMV_SLOW=120         a case whose first run takes longer than this many seconds gets
#                         SIMV_SLOW_RUNS runs instead of SIMV_RUNS (noted in the JSON)
#   SIMV_SLOW_RUNS=3
#   SIMV_WORK=/tmp/libi-sim-validate   raw reports and the built replay client
#   SIMV_OUT=bench/data/sim-validate.json
#   CARGO_TARGET_DIR      honoured (release binaries from $CARGO_TARGET_DIR/release)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${SIMV_RUNS:-5}
AGENTS=${SIMV_AGENTS:-4 16 64}
PPNS=${SIMV_PPN:-1 16 64}
TREE=${SIMV_TREE:-greedy}
PUSH=${SIMV_PUSH:-16M}
TRACE=${SIMV_TRACE:-$ROOT/sim/workloads/mpich4-init.pmitrace}
SLOW=${SIMV_SLOW:-120}
SLOW_RUNS=${SIMV_SLOW_RUNS:-3}
WORK=${SIMV_WORK:-/tmp/libi-sim-validate}
OUT=${SIMV_OUT:-$ROOT/bench/data/sim-validate.json}
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TGT" in /*) ;; *) TGT=$ROOT/$TGT ;; esac
LIBI=$TGT/release/libi-mpiexec

log() { echo "sim-validate: $*" >&2; }

log "cargo build --release --workspace --bins (target $TGT)"
cargo build --release --workspace --bins -q
mkdir -p "$WORK" "$(dirname "$OUT")"
cc -O2 -o "$WORK/pmi_replay" tests/programs/pmi_replay.c
[ -f "$TRACE" ] || { log "no workload $TRACE"; exit 1; }
RUNS_FILE=$WORK/runs.jsonl
: >"$RUNS_FILE"

# one_run K R I: one job; appends one JSON line to $RUNS_FILE; prints its wall seconds
one_run() {
  local k=$1 r=$2 i=$3 hosts n report t0 t1 st=0 ok wall
  hosts=$(seq -f "n%g:$r" 1 "$k" | paste -sd,)
  n=$((k * r))
  report=$WORK/report-$k-$r-$i.json
  rm -f "$report"
  t0=$(date +%s.%N)
  MPIEXEC_TIMEOUT=600 "$LIBI" -launcher fork -hosts "$hosts" --tree "$TREE" -n "$n" \
    --kvs-push-max "$PUSH" --report "$report" "$WORK/pmi_replay" "$TRACE" >"$WORK/out" 2>"$WORK/err" || st=$?
  t1=$(date +%s.%N)
  wall=$(printf "%.4f" "$(echo "$t1 - $t0" | bc)")
  ok=$(grep -c " of $n ok " "$WORK/out" || true)
  if [ "$st" -ne 0 ] || [ "$ok" -ne "$n" ]; then
    log "run $k x $r #$i failed (status $st, $ok of $n ranks ok): $(head -c 300 "$WORK/err")"
  fi
  printf '{"agents":%s,"ppn":%s,"run":%s,"status":%s,"ranks_ok":%s,"wall":%s,"report":"%s"}\n' \
    "$k" "$r" "$i" "$st" "$ok" "$wall" "$report" >>"$RUNS_FILE"
  echo "$wall"
}

for k in $AGENTS; do
  for r in $PPNS; do
    runs=$RUNS
    for ((i = 1; i <= runs; i++)); do
      w=$(one_run "$k" "$r" "$i")
      log "$k agents x $r ranks, run $i/$runs: ${w}s"
      if [ "$i" -eq 1 ] && [ "$runs" -gt "$SLOW_RUNS" ] && [ "$(echo "$w > $SLOW" | bc)" -eq 1 ]; then
        runs=$SLOW_RUNS
        log "first run over ${SLOW}s: $runs runs for this case"
      fi
    done
  done
done

SIMV_PUSH_ARG=$PUSH python3 - "$RUNS_FILE" "$OUT" "$RUNS" "$TREE" "$TRACE" "$ROOT" <<'EOF'
import json, os, platform, statistics, sys
runs_file, out, want_runs, tree, trace, root = sys.argv[1:7]
cases = {}
for line in open(runs_file):
    run = json.loads(line)
    cases.setdefault((run['agents'], run['ppn']), []).append(run)

def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None

result = []
for (k, r), runs in sorted(cases.items()):
    good, per = [], []
    for run in runs:
        ok = run['status'] == 0 and run['ranks_ok'] == k * r
        rep = None
        if ok and os.path.exists(run['report']):
            with open(run['report']) as f:
                rep = json.load(f)
        if rep is None:
            continue
        fences = {}
        for node in rep['reports']:
            for fr in node['fences']:
                e = fences.setdefault(fr['epoch'], [0.0, 0.0])
                e[0] = max(e[0], fr['enter'])
                e[1] = max(e[1], fr['leave'])
        epochs = sorted(fences)
        per.append({
            'launch_s': rep['launch_time'],
            'first_fence_in_s': fences[epochs[0]][0] if epochs else None,
            'first_fence_s': fences[epochs[0]][1] if epochs else None,
            'fences_s': [fences[e][1] for e in epochs],
            'total_s': rep['total_time'],
            'wall_s': run['wall'],
        })
        good.append(run)
    nf = max((len(p['fences_s']) for p in per), default=0)
    case = {
        'agents': k, 'ppn': r, 'ranks': k * r,
        'runs': len(runs), 'runs_ok': len(good),
        'launch_s': med([p['launch_s'] for p in per]),
        'first_fence_in_s': med([p['first_fence_in_s'] for p in per]),
        'first_fence_s': med([p['first_fence_s'] for p in per]),
        'fences_s': [med([p['fences_s'][i] for p in per if len(p['fences_s']) > i])
                     for i in range(nf)],
        'total_s': med([p['total_s'] for p in per]),
        'wall_s': med([p['wall_s'] for p in per]),
        'per_run': per,
        'reports': [run['report'] for run in good],
    }
    if len(runs) < int(want_runs):
        case['note'] = f'{len(runs)} runs instead of {want_runs}: the first run was slow'
    result.append(case)

doc = {
    'what': 'real fork-launcher runs of pmi_replay with ' + os.path.relpath(trace, root)
            + ': K simulated hosts x R ranks, ' + tree + ' tree; medians over the runs, '
            'seconds from the front end start (wall: the whole libi-mpiexec process)',
    'tree': tree,
    'kvs_push_max': os.environ['SIMV_PUSH_ARG'],
    'workload': os.path.relpath(trace, root),
    'machine': {'cpus': os.cpu_count(), 'kernel': platform.release()},
    'cases': result,
}
with open(out, 'w') as f:
    json.dump(doc, f, indent=1)
    f.write('\n')

def fmt(v):
    return '-' if v is None else f'{v:.3f}'
print(f"{'agents':>6} {'ppn':>4} {'ranks':>5} {'runs':>4} {'launch':>7} {'fence1 in':>9} "
      f"{'fence1':>7} {'total':>7} {'wall':>7}  fences")
for c in result:
    print(f"{c['agents']:>6} {c['ppn']:>4} {c['ranks']:>5} {c['runs_ok']:>2}/{c['runs']:<1} "
          f"{fmt(c['launch_s']):>7} {fmt(c['first_fence_in_s']):>9} {fmt(c['first_fence_s']):>7} "
          f"{fmt(c['total_s']):>7} {fmt(c['wall_s']):>7}  "
          + ' '.join(fmt(x) for x in c['fences_s']))
print(f'(seconds, medians; written to {out})')
EOF
