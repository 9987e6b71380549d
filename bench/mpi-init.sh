#!/usr/bin/env bash
# How long MPICH's MPI_Init takes under each process manager: NP ranks of bench/init_time.c
# (built here with the mpicc on PATH) run by each MPIEXEC in turn, RUNS rounds in rotated
# order. Prints per MPIEXEC the medians of: the time from the job's start until the last
# rank is out of MPI_Init, the mean time a rank spends in MPI_Init, and the job's wall time
# (ms). Under libi the ranks of a node load the node's topology from the file the NLA
# offers (PMI_hwloc_xmlfile) as under Hydra; an older libi (or LIBI_HWLOC_XML=0) lets them
# discover it.
#
#   bench/mpi-init.sh [-r RUNS] [-n NP] MPIEXEC...
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. ci/bench-lib.sh
RUNS=15 NP=8
while getopts r:n: o; do
  case $o in
    r) RUNS=$OPTARG ;;
    n) NP=$OPTARG ;;
    *) echo "usage: bench/mpi-init.sh [-r RUNS] [-n NP] MPIEXEC..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: bench/mpi-init.sh [-r RUNS] [-n NP] MPIEXEC..." >&2; exit 2; }
WORK=${CARGO_TARGET_DIR:-$PWD/target}/mpi-init
mkdir -p "$WORK"
mpicc -O2 -o "$WORK/init_time" bench/init_time.c
declare -A rows
for r in $(seq 1 "$RUNS"); do
  mapfile -t order < <(rotated "$r" "$@")
  for b in "${order[@]}"; do
    s=$(date +%s.%N)
    "$b" -n "$NP" "$WORK/init_time" > "$WORK/out" 2> "$WORK/err" || {
      echo "mpi-init.sh: $b failed: $(tail -n 1 "$WORK/err")" >&2; exit 1; }
    e=$(date +%s.%N)
    [ "$(wc -l < "$WORK/out")" -eq "$NP" ] || { echo "mpi-init.sh: $b: not $NP lines" >&2; exit 1; }
    rows[$b]+="$(awk -v s="$s" -v e="$e" '{if ($3 - s > m) m = $3 - s; d += $3 - $2}
      END {printf "%.2f,%.2f,%.2f", m * 1000, d / NR * 1000, (e - s) * 1000}' "$WORK/out") "
  done
done
printf "%-44s %14s %16s %10s\n" mpiexec "all init ms" "init/rank ms" "wall ms"
med() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for b in "$@"; do
  # shellcheck disable=SC2086
  v=$(printf '%s\n' ${rows[$b]})
  printf "%-44s %14s %16s %10s\n" "$b" "$(cut -d, -f1 <<< "$v" | med)" \
    "$(cut -d, -f2 <<< "$v" | med)" "$(cut -d, -f3 <<< "$v" | med)"
done
echo "($RUNS rounds, rotated order; $NP ranks on this node; medians)"
