#!/usr/bin/env bash
# Open MPI 5 under libi-mpiexec (PMIx from each node's libi-pmix) against Open MPI's own
# mpirun (PRRTE), same binaries, alternating run by run:
#
#   bench/pmix-mpirun.sh [-r RUNS] [NP...]
#
# For each NP (default 16 64), RUNS (default 11) runs of each launcher starting the Open MPI
# hello (pmix-server/tests/programs/hello.c, built with the wheel's mpicc in
# /opt/libi/openmpi5, or $LIBI_OPENMPI5), whose ranks each print one line. Each job runs in a
# cpuacct (v1) cgroup of its own and each rank is moved into a second one before its exec
# (bench/into_cgroup.c, as `ci/bench.sh targets` measures libi against Hydra): the job
# cgroup's CPU is then the process manager's own (front end or mpirun, agents or prted,
# libi-pmix or PRRTE's PMIx server, and each rank up to its move). Prints per launcher and NP
# the median (and quartiles) of the wall time and of that CPU, in ms, the median of the
# ranks' own CPU (from their exec on), and libi / mpirun.
# Transports pinned for both (OMPI_MCA_pml=ob1, btl self,sm,tcp on lo): the wheel's UCX and
# OFI components otherwise probe for over a second in every MPI_Init, under either launcher.
# Uses target/release (cargo build --release first). Needs a writable /sys/fs/cgroup/cpuacct
# (root). A failed run is reported and left out; the script then exits 1.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. ci/bench-lib.sh
RUNS=11
while getopts "r:" o; do
  case $o in
    r) RUNS=$OPTARG ;;
    *) sed -n 2,20p "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
NPS=("$@")
[ ${#NPS[@]} -gt 0 ] || NPS=(16 64)
OMPI=${LIBI_OPENMPI5:-/opt/libi/openmpi5}
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
WORK=${CARGO_TARGET_DIR:-$PWD/target}/pmix-mpirun
[ -x "$OMPI/bin/mpicc" ] || { echo "pmix-mpirun.sh: no Open MPI 5 in $OMPI (ci/install-deps.sh)" >&2; exit 1; }
[ -x "$BIN/libi-mpiexec" ] && [ -x "$BIN/libi-pmix" ] || { echo "pmix-mpirun.sh: build first: cargo build --release" >&2; exit 1; }
[ -w "$CG_ROOT" ] || { echo "pmix-mpirun.sh: $CG_ROOT is not writable (cgroup v1 cpuacct, as root)" >&2; exit 1; }
mkdir -p "$WORK"
build_into_cgroup
"$OMPI/bin/mpicc" -O2 -o "$WORK/hello" pmix-server/tests/programs/hello.c
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm,tcp OMPI_MCA_btl_tcp_if_include=lo
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
libi() { echo "$BIN/libi-mpiexec -pmi pmix -n $1"; }
mpirun() { echo "$OMPI/bin/mpirun ${root[*]} --oversubscribe --bind-to none -n $1"; }

declare -A wall cpu ranks
failed=0
for np in "${NPS[@]}"; do
  CPU_JOB_RE="^hello [0-9]+ of $np\$" CPU_JOB_N=$np
  for r in $(seq 1 "$RUNS"); do
    mapfile -t order < <(rotated "$r" libi mpirun)
    for who in "${order[@]}"; do
      # shellcheck disable=SC2046 # the launcher's words
      cpu_job "pmix-$np-$r-$who" $($who "$np") "$WORK/hello"
      if [ "$RC" -ne 0 ] || [ -z "$CPU_NS" ]; then
        echo "pmix-mpirun.sh: $who -n $np run $r failed: $NOTE" >&2
        failed=1
        continue
      fi
      wall[$who.$np]+="$(awk -v w="$WALL" 'BEGIN { printf "%.3f", w * 1000 }') "
      cpu[$who.$np]+="$(awk -v c="$CPU_NS" 'BEGIN { printf "%.3f", c / 1e6 }') "
      ranks[$who.$np]+="$(awk -v c="${RANKS_NS:-0}" 'BEGIN { printf "%.3f", c / 1e6 }') "
    done
  done
done

# median and quartiles of the numbers given
stats() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) { print "- - -"; exit }
  lo = int((NR + 3) / 4); hi = int((3 * NR + 1) / 4); if (hi < 1) hi = 1
  printf "%.1f %.1f %.1f", a[int((NR + 1) / 2)], a[lo], a[hi] }'; }
printf '%-6s %-8s %24s %28s %16s\n' np launcher "wall ms: median (q1-q3)" "own CPU ms: median (q1-q3)" "ranks' CPU ms"
for np in "${NPS[@]}"; do
  for who in libi mpirun; do
    read -r wm wq1 wq3 <<<"$(echo "${wall[$who.$np]:-}" | stats)"
    read -r cm cq1 cq3 <<<"$(echo "${cpu[$who.$np]:-}" | stats)"
    read -r rm _ _ <<<"$(echo "${ranks[$who.$np]:-}" | stats)"
    printf '%-6s %-8s %10s (%s-%s) %14s (%s-%s) %16s\n' "$np" "$who" "$wm" "$wq1" "$wq3" "$cm" "$cq1" "$cq3" "$rm"
    eval "M_${who}_w=$wm M_${who}_c=$cm"
  done
  # shellcheck disable=SC2154 # set by the eval above
  awk -v lw="$M_libi_w" -v mw="$M_mpirun_w" -v lc="$M_libi_c" -v mc="$M_mpirun_c" -v np="$np" \
    'BEGIN { if (mw > 0 && mc > 0) printf "%-6s libi/mpirun: wall %.2fx, own CPU %.2fx\n", np, lw / mw, lc / mc }'
done
exit "$failed"
