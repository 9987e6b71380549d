#!/bin/sh
# Attach-and-launch time of the LIBI session API (issue 52; not part of CI), printed as
# tables for bench/results.md:
#  1. real: a job of `sleep` ranks, one per fork-launched simulated host (8 and 64 hosts),
#     and bench/libi_attach.c attaching to it REPS times: LIBI_fe_attachAndLaunch from its
#     call to its return (the job's table and launcher asked on its control socket, a
#     session of one daemon per host launched the way the job's agents were, the table
#     broadcast to the daemons in LIBI_init), then LIBI_fe_endSession; and the two control
#     socket questions alone (`libi-mpiexec --proctable PID`, `--job-launcher PID`).
#  2. libi-sim: the session's side of it as a PMGR workload (what an attach daemon's
#     LIBI_init does: open, barrier, broadcast of the table's length and of the table,
#     barrier; then LIBI_finalize's barrier and close), the table as big as libi's text
#     for one `sleep` rank per host, at 8 and 64 agents (vm costs: every agent on this 2-core
#     VM, to compare with 1) and at
#     1,000 and 10,000 agents (ssh costs: a LAN cluster).
#   bench/libi-attach.sh [HOSTS...]     default: 8 64      REPS (default 5)
set -eu
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
HOSTS=${*:-8 64}
cargo build --release -q -p libi-mpiexec -p libi-nla -p libi-capi -p libi-sim
export PKG_CONFIG_PATH=$PWD/target/release
M=$PWD/target/release/libi-mpiexec
export LIBI_MPIEXEC=$M
out=$(mktemp -d)
job=
cleanup() {
    [ -z "$job" ] || { kill -INT "$job" 2>/dev/null || true; wait "$job" 2>/dev/null || true; }
    rm -rf "$out"
}
trap cleanup EXIT
cc -O2 -Wall -Werror -o "$out/libi_attach" bench/libi_attach.c $(pkg-config --cflags --libs libi)

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# min / median / max of a column of numbers (seconds), in ms
stats() { sort -g > "$out/col"; printf '%.1f / %.1f / %.1f' \
    "$(head -n1 "$out/col" | awk '{print $1 * 1000}')" \
    "$(median < "$out/col" | awk '{print $1 * 1000}')" \
    "$(tail -n1 "$out/col" | awk '{print $1 * 1000}')"; }
now() { date +%s.%N; }

echo "## real (fork launcher, simulated hosts on this machine), $REPS attaches each"
echo
echo "| hosts (ranks) | attachAndLaunch ms min / median / max | endSession ms min / median / max | --proctable ms (median) | --job-launcher ms (median) | daemons, ranks seen |"
echo "|---:|---:|---:|---:|---:|---|"
for n in $HOSTS; do
    hosts=$(seq -s, -f "n%g:1" 1 "$n")
    "$M" -launcher fork -hosts "$hosts" -n "$n" sleep 100000 </dev/null >/dev/null 2>&1 &
    job=$!
    # wait for every rank to run (its pid in the table)
    i=0
    until [ "$("$M" --proctable "$job" 2>/dev/null | awk '$3 != 0' | wc -l)" -eq "$n" ]; do
        i=$((i + 1)); [ $i -lt 300 ] || { echo "the job never came up" >&2; exit 1; }
        sleep 0.1
    done
    : > "$out/q"; : > "$out/l"
    for r in $(seq "$REPS"); do
        t0=$(now); "$M" --proctable "$job" >/dev/null; t1=$(now); "$M" --job-launcher "$job" >/dev/null; t2=$(now)
        echo "$t0 $t1" | awk '{print $2 - $1}' >> "$out/q"
        echo "$t1 $t2" | awk '{print $2 - $1}' >> "$out/l"
    done
    "$out/libi_attach" "$job" "$REPS" > "$out/runs"
    seen=$(awk '{print $3, $4}' "$out/runs" | sort -u | paste -sd' ')
    a=$(sed 's/.*attach_s=\([^ ]*\).*/\1/' "$out/runs" | stats)
    e=$(sed 's/.*end_s=\([^ ]*\).*/\1/' "$out/runs" | stats)
    q=$(median < "$out/q" | awk '{printf "%.1f", $1 * 1000}')
    l=$(median < "$out/l" | awk '{printf "%.1f", $1 * 1000}')
    echo "| $n ($n) | $a | $e | $q | $l | $seen |"
    kill -INT "$job"; wait "$job" 2>/dev/null || true; job=
done

echo
echo "## libi-sim: the session's launch and the table broadcast (PMGR workload)"
echo
# libi's table text (session/src/fe.rs proctab_text) for n hosts nI with one rank each:
# "LIBI-PROCTAB/1 n\n", a line per host "nI\n", a line per rank "R nI PID sleep\n" (5-digit
# pids).
table_bytes() { awk -v n="$1" 'BEGIN { b = length("LIBI-PROCTAB/1 " n) + 1
    for (i = 1; i <= n; i++) { h = "n" i; b += length(h) + 1 + length((i - 1) " " h " 12345 sleep") + 1 }
    print b }'; }
echo "| agents | costs | table bytes | ranks started s | every member in LIBI_init (1st barrier) s | table broadcast done s | LIBI_init returns (2nd barrier) s | session ended s | tree bytes |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for spec in 8:vm 64:vm 1000:ssh 10000:ssh; do
    n=${spec%%:*}; costs=${spec#*:}
    tb=$(table_bytes "$n")
    cat > "$out/attach.pmitrace" <<EOF
# An attach daemon's LIBI_init (session/src/member.rs): open, barrier, the table's length and
# the table broadcast from the master, barrier; LIBI_finalize: barrier, close.
>pmgr open
>pmgr barrier
>pmgr bcast root=0 size=8
>pmgr bcast root=0 size=$tb
>pmgr barrier
>pmgr barrier
>pmgr close
EOF
    target/release/libi-sim --nodes "$n" --ppn 1 --workload "$out/attach.pmitrace" --costs "$costs" \
        --json "$out/sim.json" >/dev/null
    python3 - "$out/sim.json" "$n" "$costs" "$tb" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))[0]
c = o.get("colls_done") or []
assert o.get("status") == 0 and len(c) >= 4, o
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {o['launch']:.4f} | {c[0]:.4f} | {c[2]:.4f} | "
      f"{c[3]:.4f} | {o['end']:.4f} | {o['tree_bytes']} |")
EOF
done
