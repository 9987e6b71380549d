#!/usr/bin/env bash
# Where the process manager's own CPU goes, process by process, kernel against user space:
# MPICH hello (or another program) run by bench/pmfloor.c (the floor: one C process) and by
# libi (front end + one agent), alternating run by run. Each process is measured alone with
# `perf stat --no-inherit` (task-clock: exact CPU time, unlike getrusage's tick-sampled
# user/sys split), and sampled with `perf record --no-inherit` (cpu-clock) for the share of
# its samples in the kernel. The agent is measured through LIBI_NLA (a wrapper that runs it
# under perf). Prints the median task-clock, page faults and context switches of each
# process, and its kernel and user-space milliseconds (median task-clock times the median
# kernel share of the sampled runs).
#
#   bench/cpu-split.sh [-r RUNS] [-n NP] [-p PROGRAM] [-b BUSY]
#
# RUNS (default 15) per contender, NP ranks (64), PROGRAM (MPICH hello.c, built here with
# the mpicc on PATH), BUSY processes that only spin meanwhile (default 0: CPU contention, as
# busy-polling ranks make). Needs perf (Debian: linux-perf) and, for the agent's samples,
# kernel.perf_event_paranoid <= 2 or root. Not part of the test suite.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. ci/bench-lib.sh
cpu_opts 15 2,17 0 0 "$@"
command -v perf >/dev/null || { echo "cpu-split.sh: perf is not installed (Debian: linux-perf)" >&2; exit 1; }
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
WORK=$TARGET/cpu-split
rm -rf "$WORK"
mkdir -p "$WORK/stat" "$WORK/rec"
EVENTS=task-clock,page-faults,context-switches
cargo build --release --quiet -p libi-mpiexec -p libi-nla
FE=$TARGET/release/libi-mpiexec
NLA=$TARGET/release/libi-nla
cc -O2 -o "$WORK/pmfloor" bench/pmfloor.c
if [ -z "$PROG" ]; then
  mpicc -DPROG='"hello"' -O2 -o "$WORK/hello" tests/programs/hello.c
  PROG=$WORK/hello
fi

# The agent's wrapper: MODE stat or rec, the output file named after the wrapper's pid
# (which the agent keeps: exec). --parent-pid names the wrapper, which is the agent.
cat > "$WORK/nla-wrap" <<EOF
#!/usr/bin/env bash
a=()
while [ \$# -gt 0 ]; do
  if [ "\$1" = --parent-pid ]; then shift 2; continue; fi
  a+=("\$1"); shift
done
case \$SPLIT_MODE in
  stat) exec perf stat --no-inherit -x, -o "$WORK/stat/nla.\$\$" -e $EVENTS "$NLA" "\${a[@]}" --parent-pid \$\$ ;;
  rec) exec perf record -q --no-inherit -e cpu-clock -F 10000 -o "$WORK/rec/nla.\$\$" "$NLA" "\${a[@]}" --parent-pid \$\$ ;;
esac
EOF
chmod +x "$WORK/nla-wrap"

# quiet CMD...: run CMD, its output dropped; when it fails, say which and why, and stop.
quiet() {
  "$@" >/dev/null 2>"$WORK/run.err" || { echo "cpu-split.sh: failed: $* ($(tail -n 1 "$WORK/run.err"))" >&2; exit 1; }
}
# stat_one NAME CMD...: one perf stat of CMD's own process, appended to $WORK/stat/NAME as
# "task_ms,faults,switches".
stat_one() {
  local name=$1; shift
  quiet perf stat --no-inherit -x, -o "$WORK/stat/one" -e "$EVENTS" "$@"
  fields "$WORK/stat/one" >> "$WORK/stat/$name"
}
# rec NAME CMD...: one perf record of CMD's own process into $WORK/rec/NAME.
rec() {
  local name=$1; shift
  quiet perf record -q --no-inherit -e cpu-clock -F 10000 -o "$WORK/rec/$name" "$@"
}
# fields FILE: a perf stat -x, file as "task_ms,faults,switches".
fields() {
  awk -F, '$3 == "task-clock" {t = $1} $3 == "page-faults" {f = $1} $3 == "context-switches" {c = $1}
    END {printf "%s,%s,%s\n", t, f, c}' "$1"
}
# kshare FILE: the share of FILE's samples taken in the kernel.
kshare() {
  perf report -i "$1" --stdio --sort dso 2>/dev/null |
    awk '/^ +[0-9.]+%/ {p = $1; sub("%", "", p); if ($2 == "[kernel.kallsyms]") k += p; t += p}
      END {if (t > 0) printf "%.4f\n", k / t}'
}

busy_start
for r in $(seq 1 "$RUNS"); do
  order="floor libi"
  [ $((r % 2)) -eq 0 ] && order="libi floor"
  for c in $order; do
    case $c in
      floor)
        stat_one floor "$WORK/pmfloor" -n "$NP" "$PROG"
        rec "floor.$r" "$WORK/pmfloor" -n "$NP" "$PROG"
        ;;
      libi)
        SPLIT_MODE=stat LIBI_NLA=$WORK/nla-wrap stat_one fe "$FE" -n "$NP" "$PROG"
        for f in "$WORK"/stat/nla.*; do fields "$f" >> "$WORK/stat/nla"; rm -f "$f"; done
        SPLIT_MODE=rec LIBI_NLA=$WORK/nla-wrap rec "fe.$r" "$FE" -n "$NP" "$PROG"
        ;;
    esac
  done
done

median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "nan"}'; }
printf "%-26s %10s %9s %9s %8s %10s %8s\n" process "task ms" faults switches kernel "kernel ms" "user ms"
row() {
  local label=$1 statf=$2 recglob=$3 t f s k
  t=$(cut -d, -f1 "$statf" | median)
  f=$(cut -d, -f2 "$statf" | median)
  s=$(cut -d, -f3 "$statf" | median)
  k=$(for x in $recglob; do kshare "$x"; done | median)
  awk -v l="$label" -v t="$t" -v f="$f" -v s="$s" -v k="$k" \
    'BEGIN {printf "%-26s %10.2f %9d %9d %7.0f%% %10.2f %8.2f\n", l, t, f, s, 100 * k, t * k, t * (1 - k)}'
}
row "floor (pmfloor)" "$WORK/stat/floor" "$WORK/rec/floor.*"
row "libi agent (libi-nla)" "$WORK/stat/nla" "$WORK/rec/nla.*"
row "libi front end" "$WORK/stat/fe" "$WORK/rec/fe.*"
echo "($RUNS runs each, alternating; $NP ranks of $(basename "$PROG"); $BUSY busy processes meanwhile; medians)"
