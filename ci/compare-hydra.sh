#!/usr/bin/env bash
# Quick side-by-side: libi-mpiexec vs mpiexec.hydra on this machine, median of RUNS runs,
# the two alternating run by run. Prints a markdown table. Not part of the test suite.
#   ci/compare-hydra.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
bash ci/install-deps.sh >/dev/null
cargo build --release --workspace --bins -q
LIBI=$PWD/target/release/libi-mpiexec
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -DPROG='"hello"' -O2 -o "$work/hello" tests/programs/hello.c

now() { date +%s%N; }
# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

measure() { # label, args...
  local label=$1; shift
  local l=() h=()
  for _ in $(seq 1 "$RUNS"); do
    local s; s=$(now); "$LIBI" "$@" >/dev/null; l+=($(( ($(now) - s) / 1000 )))
    s=$(now); "${HYDRA:-mpiexec.hydra}" "$@" >/dev/null; h+=($(( ($(now) - s) / 1000 )))
  done
  local lm hm
  lm=$(printf '%s\n' "${l[@]}" | median)
  hm=$(printf '%s\n' "${h[@]}" | median)
  awk -v n="$label" -v a="$lm" -v b="$hm" \
    'BEGIN { printf "| %-22s | %9.1f | %9.1f | %5.2f |\n", n, a/1000, b/1000, a/b }'
}

echo "median of $RUNS runs each, alternating; times in ms; ratio = libi / hydra"
echo
echo "| case                   |   libi ms |  hydra ms | ratio |"
echo "|------------------------|-----------|-----------|-------|"
measure "-n 64 hostname" -n 64 hostname
for n in 8 32 64; do
  measure "MPICH hello n=$n" -n "$n" "$work/hello"
done
# Dynamic processes: MPICH 5 (the PyPI wheel ci/install-deps.sh installs) against its own
# Hydra; the program spawns 2, then 1+2 children and talks to them (tests/programs/spawn.c).
M5=${LIBI_MPICH5:-/opt/libi/mpich5}
if [ -x "$M5/bin/mpicc" ]; then
  "$M5/bin/mpicc" -o "$work/spawn" tests/programs/spawn.c
  HYDRA=$M5/bin/mpiexec measure "MPICH5 spawn 2, 1+2" -genv MPIR_CVAR_CH4_NETMOD ofi -n 1 "$work/spawn"
  HYDRA=$M5/bin/mpiexec measure "MPICH5 spawn, 2 parents" -genv MPIR_CVAR_CH4_NETMOD ofi -n 2 "$work/spawn"
fi
