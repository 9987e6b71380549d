#!/usr/bin/env bash
# libi-sim's memory estimate against the peak RSS it measures (bench/results.md §8, "Memory
# estimate"): for each case, the estimate (`--estimate`) and the run's max RSS from
# /usr/bin/time -v. Not part of CI (the biggest cases take minutes and ~3 GB).
#
#   bench/sim-memory.sh                 the cases below
#   bench/sim-memory.sh "--nodes 64 --ppn 16" ...   these cases instead
#
# Every run is given --max-mem ${SIMM_MAX_MEM:-8G}: a case estimated above it is refused
# (and reported as such) rather than run.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
cargo build --release -q -p libi-sim
SIM=${CARGO_TARGET_DIR:-target}/release/libi-sim
MAX=${SIMM_MAX_MEM:-8G}
TIMES=$(mktemp) ERR=$(mktemp)
trap 'rm -f "$TIMES" "$ERR"' EXIT
if [ $# -gt 0 ]; then
  cases=("$@")
else
  cases=(
    "--nodes 1000 --ppn 1 --workload fence --kvs-push-max 0"
    "--nodes 100000 --ppn 1 --workload fence --kvs-push-max 0"
    "--nodes 1000 --ppn 16 --workload fence --kvs-push-max 0"
    "--nodes 10000 --ppn 64 --workload fence --kvs-push-max 0"
    "--nodes 256 --ppn 16 --workload mpich-init --kvs-push-max 0"
    "--nodes 1000 --ppn 16 --workload mpich-init --kvs-push-max 0"
    "--nodes 2000 --ppn 4 --workload mpich-init --kvs-push-max 0"
    "--nodes 256 --ppn 16 --workload mpich-init"
    "--nodes 1000 --ppn 16 --workload mpich-init"
    "--nodes 500 --ppn 16 --workload mpich-init --kvs-push-max 1G"
    "--nodes 3000 --ppn 16 --workload mpich-init --skip-slice"
    "--nodes 10000 --ppn 16 --workload mpich-init --skip-slice"
    "--nodes 1000 --ppn 16 --workload mpich5-init"
    "--nodes 1000 --ppn 64 --workload mpich-init --skip-slice --kvs-push-max 0"
    "--nodes 10000 --ppn 16 --workload mpich-init --skip-slice --kvs-push-max 0"
    "--nodes 30000 --ppn 16 --workload mpich-init --skip-slice --kvs-push-max 0"
    "--nodes 100000 --ppn 16 --workload mpich-init --skip-slice --kvs-push-max 0"
  )
fi
printf '%-72s %10s %10s %7s %7s\n' "case" "estimate" "peak RSS" "est/RSS" "wall s"
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  est=$($SIM $c --estimate | sed -n 's/.*: about \([0-9.]*\) \([KMGT]B\).*/\1 \2/p')
  # shellcheck disable=SC2086
  if /usr/bin/time -o "$TIMES" -f '%M %e' $SIM $c --max-mem "$MAX" >/dev/null 2>"$ERR"; then
    read -r kib wall <"$TIMES"
    mib=$((kib / 1024))
    ratio=$(awk -v e="$est" -v m="$mib" 'BEGIN { split(e, a, " "); u = a[2] == "GB" ? 1024 : a[2] == "TB" ? 1048576 : 1; printf "%.2f", a[1] * u / m }')
    printf '%-72s %10s %7s MB %7s %7s\n' "$c" "$est" "$mib" "$ratio" "$wall"
  else
    printf '%-72s %10s %10s  (%s)\n' "$c" "$est" "refused" "$(head -c 120 "$ERR")"
  fi
done
