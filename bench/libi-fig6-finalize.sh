#!/bin/sh
# The LIBI paper's micro benchmark (examples/libi/microbench_*.c, as bench/libi-fig6.sh runs
# it) at NODES fork-launched simulated nodes, one member per node, reporting what Fig. 6
# leaves out: LIBI_fe_finalize's time (called once the master's timings arrived, until it
# returned: every member, agent and the session's libi-mpiexec gone), with the launch
# (LIBI_fe_launch until every member is in LIBI_init). Issue 52's target: finalize under
# 0.2 s at 64 fork nodes. Prints a table of min / median / max over REPS runs per tree. Not
# part of CI; writes nothing.
#   bench/libi-fig6-finalize.sh [NODES]     default 64; TREES (default: the six of Fig. 6),
#                                           REPS (default 5), ITER (default 100)
set -eu
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
ITER=${ITER:-100}
NODES=${1:-64}
TREES=${TREES:-chain flat greedy kary:2 kary:16 kary:32}
cargo build --release -q -p libi-mpiexec -p libi-nla -p libi-capi
export PKG_CONFIG_PATH=$PWD/target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -o "$out/fe" examples/libi/microbench_fe.c $(pkg-config --cflags --libs libi)
cc -O2 -o "$out/member" examples/libi/microbench_member.c $(pkg-config --cflags --libs libi)
export LIBI_MPIEXEC=$PWD/target/release/libi-mpiexec
hosts=$(seq -s, -f "n%g:1" 1 "$NODES")
col() { # KEY FILE: min / median / max of KEY=value
    sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2" | sort -g | awk '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3f / %.3f / %.3f", v[1], m, v[NR] }'
}
echo "| nodes | tree | launch s min / median / max | finalize s min / median / max | errors |"
echo "|---:|---|---:|---:|---:|"
for tree in $TREES; do
    : > "$out/runs"
    for r in $(seq "$REPS"); do
        LIBI_MPIEXEC_ARGS="-launcher fork --tree $tree" "$out/fe" "$out/member" "$hosts" "$ITER" >> "$out/runs"
    done
    errs=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' "$out/runs" | sort -u | paste -sd,)
    echo "| $NODES | $tree | $(col launch_s "$out/runs") | $(col finalize_s "$out/runs") | $errs |"
done
