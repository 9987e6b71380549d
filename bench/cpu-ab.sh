#!/usr/bin/env bash
# A/B of the process manager's own CPU: MPICH hello n=64 (or another program) run by two or
# more mpiexec binaries, alternating run by run, each job in a cpuacct (v1) cgroup of its
# own, each rank moved into a second cgroup before its exec by bench/into_cgroup.c, as
# `ci/bench.sh targets` measures its "own processes" row. For trying a change to the front
# end or the agent: build the other version elsewhere (a git worktree with its own
# CARGO_TARGET_DIR), then
#
#   bench/cpu-ab.sh [-r RUNS] [-n NP] [-p PROGRAM] [-b BUSY] MPIEXEC...
#
# RUNS (default 21) per binary, NP ranks (64), PROGRAM (MPICH hello.c built with -DSELF_CPU
# here, with the mpicc on PATH), BUSY processes that only spin meanwhile (default 0: CPU
# contention, as busy-polling ranks make). A libi-mpiexec starts the libi-nla beside it. Prints per
# binary the median and quartiles of the job cgroup's CPU (front end, agents, and each rank
# up to its move), in ms. Needs a writable /sys/fs/cgroup/cpuacct (root). A run that fails
# is reported and left out, and the script then exits 1.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
# timed, rotated, cpu_job (and CG_ROOT), as ci/bench.sh measures with them; cpu_opts
. ci/bench-lib.sh
cpu_opts 21 2,16 1 "" "$@"
set -- "${OPERANDS[@]}"
WORK=${CARGO_TARGET_DIR:-$PWD/target}/cpu-ab
[ -w "$CG_ROOT" ] || { echo "cpu-ab.sh: $CG_ROOT is not writable (cgroup v1 cpuacct, as root)" >&2; exit 1; }
mkdir -p "$WORK"
build_into_cgroup
# MPICH hello's ranks each print a line ending in " ok"; another program's output is not checked.
CPU_JOB_N=0
if [ -z "$PROG" ]; then
  mpicc -DPROG='"hello"' -DSELF_CPU -O2 -o "$WORK/hello_cpu" tests/programs/hello.c
  PROG=$WORK/hello_cpu CPU_JOB_N=$NP
fi
declare -A ms
failed=0
busy_start
for r in $(seq 1 "$RUNS"); do
  mapfile -t order < <(rotated "$r" "$@")
  for b in "${order[@]}"; do
    cpu_job "ab-$r" "$b" -n "$NP" "$PROG"
    if [ "$RC" -eq 0 ] && [ -n "$CPU_NS" ]; then
      ms[$b]+="$(awk -v ns="$CPU_NS" 'BEGIN {printf "%.3f", ns / 1e6}') "
    else
      echo "cpu-ab.sh: run $r of $b failed: ${NOTE:-no cgroup CPU figure}" >&2
      failed=1
    fi
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
