#!/usr/bin/env bash
# A/B of the process manager's own CPU: MPICH hello n=64 (or another program) run by two or
# more mpiexec binaries, alternating run by run, each job in a cpuacct (v1) cgroup of its
# own, each rank moved into a second cgroup before its exec by bench/into_cgroup.c, as
# `ci/bench.sh targets` measures its "own processes" row. For trying a change to the front
# end or the agent: build the other version elsewhere (a git worktree with its own
# CARGO_TARGET_DIR), then
#
#   bench/cpu-ab.sh [-r RUNS] [-n NP] [-p PROGRAM] MPIEXEC...
#
# RUNS (default 21) per binary, NP ranks (64), PROGRAM (MPICH hello.c built with -DSELF_CPU
# here, with the mpicc on PATH). A libi-mpiexec starts the libi-nla beside it. Prints per
# binary the median and quartiles of the job cgroup's CPU (front end, agents, and each rank
# up to its move), in ms. Needs a writable /sys/fs/cgroup/cpuacct (root). A run that fails
# is reported and left out, and the script then exits 1.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
RUNS=21 NP=64 PROG=
while getopts "r:n:p:" o; do
  case $o in
    r) RUNS=$OPTARG ;;
    n) NP=$OPTARG ;;
    p) PROG=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
CG=/sys/fs/cgroup/cpuacct
[ -w "$CG" ] || { echo "cpu-ab.sh: $CG is not writable (cgroup v1 cpuacct, as root)" >&2; exit 1; }
WORK=${CARGO_TARGET_DIR:-$PWD/target}/cpu-ab
mkdir -p "$WORK"
cc -O2 -static -o "$WORK/into_cgroup" bench/into_cgroup.c 2>/dev/null ||
  cc -O2 -o "$WORK/into_cgroup" bench/into_cgroup.c
if [ -z "$PROG" ]; then
  mpicc -DPROG='"hello"' -DSELF_CPU -O2 -o "$WORK/hello_cpu" tests/programs/hello.c
  PROG=$WORK/hello_cpu
fi
declare -A ms
failed=0
for r in $(seq 1 "$RUNS"); do
  k=$(( (r - 1) % $# ))
  order=("${@:k+1}" "${@:1:k}")
  for b in "${order[@]}"; do
    cg=$CG/libi-cpu-ab-$$-$r
    mkdir "$cg" "$cg-ranks"
    if "$WORK/into_cgroup" "$cg" "$b" -n "$NP" "$WORK/into_cgroup" "$cg-ranks" "$PROG" \
      >"$WORK/run.out" 2>"$WORK/run.err" </dev/null; then
      ms[$b]+="$(awk '{printf "%.3f", $1 / 1e6}' "$cg/cpuacct.usage") "
    else
      echo "cpu-ab.sh: run $r of $b failed: $(tail -n 1 "$WORK/run.err")" >&2
      failed=1
    fi
    rmdir "$cg-ranks" "$cg"
  done
done
for b in "$@"; do
  if [ -z "${ms[$b]:-}" ]; then
    echo "$b: no successful run"
    continue
  fi
  # shellcheck disable=SC2086
  printf '%s\n' ${ms[$b]} | sort -n | awk -v b="$b" '
    {v[NR] = $1}
    END {
      printf "%s: median %.2f ms, quartiles %.2f-%.2f (%d runs)\n", b, v[int((NR + 1) / 2)],
        v[int((NR + 3) / 4)], v[int((3 * NR + 1) / 4)], NR
    }'
done
exit $failed
