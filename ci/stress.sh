#!/usr/bin/env bash
# Heavy runs for "bounded memory, exact cleanup, output at least as fast as Hydra": libi-mpiexec
# and, beside it wherever the case applies, mpiexec.hydra. Not part of the test suite. Builds
# the release binaries, runs every case under ci/rss_watch.py (peak RSS of the front end and of
# each agent/proxy, hard time limit, the whole tree SIGKILLed when any process passes 2 GB,
# whatever a case leaves behind reported and killed) and prints ONE markdown table on stdout;
# progress goes to stderr.
#
#   ci/stress.sh                     # about 5 minutes
#   DURATION=5 RUNS=3 ci/stress.sh   # quick
#   CASES="3 7" RUNS=9 ci/stress.sh  # some cases only
#
# DURATION   seconds of case 1 (default 60)
# RUNS       runs each of libi and hydra in case 7, alternating (default 5; median reported)
# LINES7     lines per rank in case 7, each count with and without -l (default
#            "1000000 10000000"; Hydra's -l takes about a minute a run at 10M lines here)
# RSS_LIMIT_MB  per-process RSS that kills a case (default 2048)
# SLOW_RATE  the slow reader of case 6, bytes/s for pv -L (default 10m)
# CASES      which cases to run (default all: 1 2 3 4 5 6 7 8 9)
# HUGE_N     -n of case 9's first run (default 6000000); SPAWN_N that of its third
# HYDRA      the Hydra mpiexec (default mpiexec.hydra; "none" leaves Hydra out)
#
# Cases:
#  1 -n 1 yes > /dev/null for DURATION s, then SIGTERM
#  2 -n 1 sleep 20 < /dev/zero (RSS must stay flat)
#  3 -n 1 yes | head -1 (must end; limit 30 s)
#  4 MPIEXEC_TIMEOUT=2 -n 1 yes | (sleep 12) (when does mpiexec exit?)
#  5 -n 1 yes > a fifo nobody reads, SIGTERM after 2 s (time to exit after SIGTERM)
#  6 -n 4 flood_fence: rank 0 floods stdout while all ranks run 100 PMI-1 fences;
#    stdout to /dev/null, then into a slow reader
#  7 -n 4 sh -c 'seq 1 LINES' | wc -l, with and without -l: medians of RUNS alternating runs,
#    wall and CPU (the process manager's own, and the whole tree's)
#  8 -launcher fork -hosts n1:1,..,n4:1 -n 4 bigfence 300MiB (if tests/programs/bigfence.c exists)
#  9 a huge -n on one node: -n HUGE_N true (default 6000000), -ppn 16777216 -hosts localhost true,
#    and -n SPAWN_N sleep 30 (default 4000, or 90 % of what the machine lets us run), each SIGTERMed
#    after 3 s: peak RSS of the front end and of each agent/proxy, and what outlives the front
#    end. Exhausts the machine's pids for a while under Hydra: run it on a quiet machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PROG=ci/stress.sh
DURATION=${DURATION:-60}
RUNS=${RUNS:-5}
RSS_LIMIT_MB=${RSS_LIMIT_MB:-2048}
SLOW_RATE=${SLOW_RATE:-10m}
HYDRA=${HYDRA:-mpiexec.hydra}
CASES=" ${CASES:-1 2 3 4 5 6 7 8 9} "
HUGE_N=${HUGE_N:-6000000}

die() { echo "$PROG: $*" >&2; exit 2; }
log() { echo "$PROG: $*" >&2; }

[ "$HYDRA" = none ] || command -v "$HYDRA" >/dev/null || { log "no $HYDRA: Hydra left out"; HYDRA=none; }
command -v python3 >/dev/null || die "needs python3"
command -v mpicc >/dev/null || command -v cc >/dev/null || die "needs mpicc or cc"

log "building release binaries"
cargo build --release --workspace --bins -q || die "build failed"
LIBI=$ROOT/target/release/libi-mpiexec
WATCH=$ROOT/ci/rss_watch.py

work=$(mktemp -d "${TMPDIR:-/tmp}/libi-stress.XXXXXX")
fifo_fd=
bg=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  # Watchers still running (we were interrupted) kill their process trees on SIGTERM.
  local f
  for f in "$work"/*.pid; do
    [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  [ -n "$bg" ] && { kill -TERM "$bg" 2>/dev/null; wait "$bg" 2>/dev/null; }
  [ -n "$fifo_fd" ] && exec {fifo_fd}>&-
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

CC=cc
command -v mpicc >/dev/null && CC=mpicc
$CC -O2 -pthread -o "$work/flood_fence" tests/programs/flood_fence.c || die "cannot compile flood_fence.c"

# watched RES LIMIT [watcher options] -- CMD...: run CMD under the RSS watcher; RES.res gets the
# result (see ci/rss_watch.py), RES.err CMD's stderr. SIGINT/SIGQUIT are given back their
# default (we run cases in the background, where a script's commands start with them ignored).
watched() {
  local res=$1 limit=$2
  shift 2
  env --default-signal=INT,QUIT python3 "$WATCH" --out "$work/$res.res" --pidfile "$work/$res.pid" \
    --limit "$limit" --rss-limit-mb "$RSS_LIMIT_MB" "$@" 2>>"$work/$res.err"
}

# run FUNC ARGS...: run a case in the background (stdin /dev/null unless the case redirects
# it) and wait for it, so that our traps still run while it does. Sets PIPE_S (how long the
# whole pipeline took).
PIPE_S=0
run() {
  local t0
  t0=$(date +%s%N)
  "$@" </dev/null &
  bg=$!
  wait "$bg"
  bg=
  PIPE_S=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
}

get() { sed -n "s/^$2=//p" "$work/$1.res" 2>/dev/null | head -1; }

ROWS=()
# row CASE WHO RES [NOTE...]: one table row from RES.res (+ the first line of RES.err); WALL,
# when set, replaces the wall time
WALL=
row() {
  local case=$1 who=$2 res=$3
  shift 3
  local notes=() n
  for n in "$@"; do [ -n "$n" ] && notes+=("$n"); done
  if [ ! -s "$work/$res.res" ]; then
    notes+=("watcher wrote no result")
  else
    n=$(get "$res" notes)
    [ -n "$n" ] && notes+=("$n")
  fi
  local err
  err=$(grep -v -m1 -e '^flood_fence:' -e '^[[:space:]]*$' "$work/$res.err" 2>/dev/null | cut -c1-100)
  [ -n "$err" ] && notes+=("stderr: $err")
  local wall=${WALL:-$(get "$res" wall)}
  [ -n "$wall" ] && wall="$wall s"
  local joined
  joined=$(printf '%s; ' "${notes[@]}")
  joined=${joined%; }
  ROWS+=("| $case | $who | ${wall:-?} | $(get "$res" status_text) | $(get "$res" rss) | ${joined//|/\\|} |")
}

# who runs each case: libi and, unless HYDRA=none, hydra
whos() { echo libi; [ "$HYDRA" = none ] || echo hydra; }
bin() { if [ "$1" = libi ]; then echo "$LIBI"; else echo "$HYDRA"; fi; }
want() { [[ $CASES == *" $1 "* ]]; }

# ---- 1. yes > /dev/null for DURATION s, then SIGTERM
if want 1; then
  c1() { watched "$1" $((DURATION + 15)) --term-after "$DURATION" -- "$2" -n 1 yes >/dev/null; }
  for who in $(whos); do
    log "case 1 ($who): -n 1 yes > /dev/null for $DURATION s"
    run c1 "c1-$who" "$(bin "$who")"
    row "1. \`-n 1 yes > /dev/null\`, ${DURATION} s, SIGTERM" "$who" "c1-$who"
  done
fi

# ---- 2. sleep 20 < /dev/zero
if want 2; then
  c2() { watched "$1" 40 -- "$2" -n 1 sleep 20 </dev/zero; }
  for who in $(whos); do
    log "case 2 ($who): -n 1 sleep 20 < /dev/zero"
    run c2 "c2-$who" "$(bin "$who")"
    row "2. \`-n 1 sleep 20 < /dev/zero\`" "$who" "c2-$who"
  done
fi

# ---- 3. yes | head -1
if want 3; then
  c3() { watched "$1" 30 -- "$2" -n 1 yes | head -1 >/dev/null; }
  for who in $(whos); do
    log "case 3 ($who): -n 1 yes | head -1"
    run c3 "c3-$who" "$(bin "$who")"
    row "3. \`-n 1 yes \\| head -1\`" "$who" "c3-$who" "pipeline ended after $PIPE_S s"
  done
fi

# ---- 4. MPIEXEC_TIMEOUT=2 with a reader that never reads
if want 4; then
  c4() { watched "$1" 30 -- env MPIEXEC_TIMEOUT=2 "$2" -n 1 yes | (sleep 12); }
  for who in $(whos); do
    log "case 4 ($who): MPIEXEC_TIMEOUT=2 -n 1 yes | (sleep 12)"
    run c4 "c4-$who" "$(bin "$who")"
    row "4. \`MPIEXEC_TIMEOUT=2 -n 1 yes \\| (sleep 12)\`" "$who" "c4-$who" "pipeline ended after $PIPE_S s"
  done
fi

# ---- 5. stdout into a fifo nobody reads (we hold it open, never read), SIGTERM after 2 s
if want 5; then
  mkfifo "$work/fifo"
  exec {fifo_fd}<>"$work/fifo"
  c5() { watched "$1" 20 --term-after 2 -- "$2" -n 1 yes >"$work/fifo"; }
  for who in $(whos); do
    log "case 5 ($who): -n 1 yes > unread fifo, SIGTERM after 2 s"
    run c5 "c5-$who" "$(bin "$who")"
    row "5. \`-n 1 yes > fifo\` nobody reads, SIGTERM at 2 s" "$who" "c5-$who"
  done
  exec {fifo_fd}>&-
  fifo_fd=
fi

# the slow reader of case 6: SLOW_RATE bytes/s (k, m suffixes)
slow_reader() {
  if command -v pv >/dev/null; then
    pv -q -L "$SLOW_RATE" >/dev/null
  else
    python3 -c '
import sys, time
rate = float(sys.argv[1].rstrip("kmKM")) * {"k": 1e3, "m": 1e6}.get(sys.argv[1][-1].lower(), 1)
start, total = time.monotonic(), 0
while True:
    b = sys.stdin.buffer.read1(65536)
    if not b:
        break
    total += len(b)
    time.sleep(max(0, start + total / rate - time.monotonic()))
' "$SLOW_RATE"
  fi
}

# ---- 6. output flood during 100 fences
if want 6; then
  c6() { watched "$1" 60 -- "$2" -n 4 "$work/flood_fence" 100 >/dev/null; }
  c6slow() { watched "$1" 60 -- "$2" -n 4 "$work/flood_fence" 100 | slow_reader; }
  fence_note() {
    local f r
    f=$(sed -n 's/^flood_fence: \([0-9]* fences in .*\)/\1/p' "$work/$1.err" | head -1)
    r=$(sed -n 's/^flood_fence: rank 0 wrote \([0-9]*\) bytes/\1/p' "$work/$1.err" | head -1)
    echo "${f:-no fence time reported}${r:+; rank 0 wrote $((r / 1048576)) MiB}"
  }
  for who in $(whos); do
    log "case 6 ($who): -n 4 flood_fence, stdout to /dev/null"
    run c6 "c6-$who" "$(bin "$who")"
    row "6. \`-n 4 flood_fence\` (100 fences, rank 0 floods) > /dev/null" "$who" "c6-$who" "$(fence_note "c6-$who")"
  done
  for who in $(whos); do
    log "case 6 ($who): -n 4 flood_fence, stdout into a $SLOW_RATE/s reader"
    run c6slow "c6s-$who" "$(bin "$who")"
    row "6. \`-n 4 flood_fence \\| slow reader\` ($SLOW_RATE/s)" "$who" "c6s-$who" "$(fence_note "c6s-$who")"
  done
fi

# ---- 7. LINES lines from each of 4 ranks, vs Hydra: wall and CPU
# Each run is a job in a cpuacct cgroup of its own (when /sys/fs/cgroup/cpuacct is writable:
# root), its ranks moved into a second one before they exec (bench/into_cgroup.c, as
# ci/bench.sh measures): "PM cpu" is what the process manager's own processes spent (front
# end and agents, or mpiexec.hydra and its proxy), "tree cpu" that plus the ranks. Without
# the cgroups, the tree's CPU is wait4's (every process is reaped along the chain) and the PM's
# is not known. wc -l is in neither.
if want 7; then
  WORK=$work
  # shellcheck source=ci/bench-lib.sh
  . ci/bench-lib.sh # build_into_cgroup, rotated, CG_ROOT
  build_into_cgroup || die "cannot build bench/into_cgroup.c"
  c7() { # RES WHO-BIN LINES [-l]
    local res=$1 b=$2 lines=$3 cg=$CG_ROOT/libi-stress-$$-$1
    shift 3
    local limit=$((60 + 30 * lines / 1000000)) pre=() rk=()
    if [ -w "$CG_ROOT" ] && mkdir "$cg" 2>/dev/null && mkdir "$cg-ranks" 2>/dev/null; then
      pre=("$work/into_cgroup" "$cg") rk=("$work/into_cgroup" "$cg-ranks")
    fi
    watched "$res" "$limit" -- "${pre[@]}" "$b" "$@" -n 4 "${rk[@]}" sh -c "seq 1 $lines" | wc -l >"$work/$res.count"
    if [ ${#pre[@]} -gt 0 ]; then
      echo "$(cat "$cg/cpuacct.usage") $(cat "$cg-ranks/cpuacct.usage")" >"$work/$res.cg"
      rmdir "$cg-ranks" "$cg" 2>/dev/null
    fi
    return 0
  }
  median() { sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
  # cpu7 RES: "PM-ms TREE-ms" of a run (PM "?" without the cgroups)
  cpu7() {
    if [ -s "$work/$1.cg" ]; then
      awk '{ printf "%.1f %.1f", $1 / 1e6, ($1 + $2) / 1e6 }' "$work/$1.cg"
    else
      get "$1" cpu | awk '{ printf "? %.1f", ($1 + $2) * 1e3 }'
    fi
  }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "?" && b + 0 > 0) printf "%.2f", a / b; else print "?" }'; }
  for lines in ${LINES7:-1000000 10000000}; do
    for opt in "" -l; do
      tag=c7-$lines$opt
      for i in $(seq 1 "$RUNS"); do
        for who in $(rotated "$i" $(whos)); do
          log "case 7 ($who${opt:+ $opt}, $lines lines): run $i of $RUNS"
          # shellcheck disable=SC2086 # opt is empty or one word
          run c7 "$tag-$who-$i" "$(bin "$who")" "$lines" $opt
        done
      done
      declare -A med=() pm=() tree=()
      for who in $(whos); do
        walls=() bad=() statuses=() pms=() trees=()
        for i in $(seq 1 "$RUNS"); do
          r=$tag-$who-$i
          walls+=("$(get "$r" wall) $r")
          statuses+=("$(get "$r" status)")
          read -r p t <<<"$(cpu7 "$r")"
          pms+=("${p:-?}") trees+=("${t:-?}")
          n=$(tr -d ' ' <"$work/$r.count" 2>/dev/null)
          [ "$n" = $((4 * lines)) ] || bad+=("run $i: ${n:-no} lines")
        done
        m=$(printf '%s\n' "${walls[@]}" | awk '{ print $1 }' | median)
        med[$who]=$m
        if printf '%s\n' "${pms[@]}" | grep -q '?'; then pm[$who]="?"; else pm[$who]=$(printf '%s\n' "${pms[@]}" | median); fi
        if printf '%s\n' "${trees[@]}" | grep -q '?'; then tree[$who]="?"; else tree[$who]=$(printf '%s\n' "${trees[@]}" | median); fi
        # the RSS cell, status and notes of the median run (of the lower middle one for even RUNS)
        mid=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p" | awk '{ print $2 }')
        lo=$(printf '%s\n' "${walls[@]}" | sort -n | head -1 | awk '{ print $1 }')
        hi=$(printf '%s\n' "${walls[@]}" | sort -n | tail -1 | awk '{ print $1 }')
        note="median of $RUNS (min $lo, max $hi s); CPU ms, medians: PM ${pm[$who]}, tree ${tree[$who]}"
        note+="; statuses $(printf '%s\n' "${statuses[@]}" | sort | uniq -c | awk '{ printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1 }')"
        if [ ${#bad[@]} -eq 0 ]; then note+="; $((4 * lines)) lines every run"; else note+="; WRONG COUNT: ${bad[*]}"; fi
        if [ "$who" = hydra ] && [ -n "${med[libi]:-}" ]; then
          note+="; libi/hydra: wall $(ratio "${med[libi]}" "$m"), PM cpu $(ratio "${pm[libi]}" "${pm[hydra]}"), tree cpu $(ratio "${tree[libi]}" "${tree[hydra]}")"
        fi
        WALL=$m row "7. \`-n 4${opt:+ $opt} sh -c 'seq 1 $lines' \\| wc -l\`" "$who" "$mid" "$note"
      done
      unset med pm tree
    done
  done
fi

# ---- 8. 300 MiB fence across 4 simulated nodes (tests/programs/bigfence.c, if present)
if want 8; then
  BIG=$((300 * 1024 * 1024))
  if [ -f tests/programs/bigfence.c ]; then
    if $CC -O2 -pthread -o "$work/bigfence" tests/programs/bigfence.c; then
      c8() { watched "$1" 120 -- "$2" -launcher fork -hosts n1:1,n2:1,n3:1,n4:1 -n 4 "$work/bigfence" "$BIG" >/dev/null; }
      for who in $(whos); do
        log "case 8 ($who): 300 MiB fence, 4 simulated nodes"
        run c8 "c8-$who" "$(bin "$who")"
        row "8. 300 MiB fence, \`-launcher fork -hosts n1:1,..,n4:1 -n 4\`" "$who" "c8-$who"
      done
    else
      ROWS+=("| 8. 300 MiB fence, 4 simulated nodes | - | - | - | - | skipped: bigfence.c does not compile |")
    fi
  else
    ROWS+=("| 8. 300 MiB fence, 4 simulated nodes | - | - | - | - | skipped: program not present (tests/programs/bigfence.c) |")
  fi
fi

# ---- 9. a huge -n on one node, SIGTERM after 3 s
if want 9; then
  # What this machine lets us run at once (the front end's own limit for a node).
  limit=$(cat /proc/sys/kernel/pid_max)
  t=$(cat /proc/sys/kernel/threads-max); [ "$t" -lt "$limit" ] && limit=$t
  if [ "$(id -u)" != 0 ]; then
    u=$(ulimit -u); [ "$u" != unlimited ] && [ "$u" -lt "$limit" ] && limit=$u
  fi
  SPAWN_N=${SPAWN_N:-$(( limit < 4000 ? limit * 9 / 10 : 4000 ))}
  c9() { local res=$1 bin=$2; shift 2; watched "$res" 60 --term-after 3 --linger 15 -- "$bin" "$@" >/dev/null; }
  i=0
  for args in "-n $HUGE_N true" "-ppn 16777216 -hosts localhost true" "-n $SPAWN_N sleep 30"; do
    i=$((i + 1))
    for who in $(whos); do
      log "case 9 ($who): $args, SIGTERM after 3 s"
      # shellcheck disable=SC2086
      run c9 "c9-$i-$who" "$(bin "$who")" $args
      row "9. \`$args\`, SIGTERM after 3 s" "$who" "c9-$i-$who" "$([ $i = 3 ] && echo "limit here $limit")"
    done
  done
fi

echo "| case | who | wall time | exit status | peak RSS per process | notes |"
echo "|------|-----|-----------|-------------|----------------------|-------|"
printf '%s\n' "${ROWS[@]}"
