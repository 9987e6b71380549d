#!/bin/sh
# The LIBI paper's Fig. 6 on this machine (not part of CI): the micro benchmark of
# examples/libi (launch; barrier; broadcast+gather 128 B; scatter+gather 128 B) for the
# chain, sequential (flat), greedy, 2-ary, 16-ary and 32-ary launch trees, one member per
# node, on fork-launched simulated nodes (and over ssh into namespace hosts when run under
# ci/with-netns-hosts.sh, which sets LIBI_TEST_HOSTS/LIBI_TEST_SSH). Medians of REPS runs.
# Then the same in libi-sim (the real node cores in virtual time, workload libi-microbench,
# ssh costs: SEQ 7 ms, REM 0.3 s per launch) at 386 nodes (the paper's largest) and 100,000
# (chain refused there: 100k levels; see MAX_TREE_DEPTH).
# Writes bench/data/libi-fig6.json, bench/data/libi-fig6-sim.json and bench/libi-fig6.svg;
# prints the table.
#   bench/libi-fig6.sh [NODES...]        default: 4 16 64
set -eu
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
ITER=${ITER:-100}
NODES=${*:-4 16 64}
cargo build --release -q -p libi-mpiexec -p libi-nla -p libi-capi
export PKG_CONFIG_PATH=$PWD/target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -o "$out/fe" examples/libi/microbench_fe.c $(pkg-config --cflags --libs libi)
cc -O2 -o "$out/member" examples/libi/microbench_member.c $(pkg-config --cflags --libs libi)
export LIBI_MPIEXEC=$PWD/target/release/libi-mpiexec
json=bench/data/libi-fig6.json
mkdir -p bench/data
echo "[" > "$json.tmp"
first=1
run() { # where launcher-args nodes hosts
    for tree in chain flat greedy kary:2 kary:16 kary:32; do
        for r in $(seq "$REPS"); do
            line=$(LIBI_MPIEXEC_ARGS="$2 --tree $tree" "$out/fe" "$out/member" "$4" "$ITER")
            [ $first = 1 ] || echo "," >> "$json.tmp"
            first=0
            echo "$line" | awk -v where="$1" -v tree="$tree" -v nodes="$3" '{
                printf "{\"where\":\"%s\",\"tree\":\"%s\",\"nodes\":%d", where, tree, nodes
                for (i = 1; i <= NF; i++) { split($i, kv, "="); printf ",\"%s\":%s", kv[1], kv[2] }
                printf "}" }' >> "$json.tmp"
        done
    done
}
for n in $NODES; do
    hosts=$(seq -s, -f "n%g:1" 1 "$n")
    run fork "-launcher fork" "$n" "$hosts"
done
if [ -n "${LIBI_TEST_HOSTS:-}" ]; then
    all=$(echo "$LIBI_TEST_HOSTS" | tr ',' ' ')
    count=$(echo "$all" | wc -w)
    for n in 2 4 8 16 32; do
        [ "$n" -le "$count" ] || break
        hosts=$(echo "$all" | tr ' ' '\n' | head -n "$n" | sed 's/$/:1/' | paste -sd,)
        run ssh "-launcher ssh -launcher-exec $LIBI_TEST_SSH" "$n" "$hosts"
    done
fi
echo "]" >> "$json.tmp"
mv "$json.tmp" "$json"
cargo build --release -q -p libi-sim
sim=bench/data/libi-fig6-sim.json
target/release/libi-sim --nodes 386 --ppn 1 --workload libi-microbench --costs ssh \
    --tree chain,flat,greedy,kary:2,kary:16,kary:32 --json "$out/sim386.json" >/dev/null
target/release/libi-sim --nodes 100000 --ppn 1 --workload libi-microbench --costs ssh \
    --tree flat,greedy,kary:2,kary:16,kary:32 --json "$out/sim100k.json" >/dev/null
python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2])), open(sys.argv[3], "w"))' \
    "$out/sim386.json" "$out/sim100k.json" "$sim"
python3 bench/libi_fig6.py "$json" bench/libi-fig6.svg --sim "$sim"
