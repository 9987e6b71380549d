# Helpers shared by ci/bench.sh and bench/cpu-ab.sh (sourced; both set WORK, the directory
# for run.out, run.err and the harness binaries, into_cgroup among them).

usec() { local t=${1/./}; echo $((10#${t/,/})); }

# timed TIMEOUT EXPECT_LINES_REGEX EXPECT_COUNT cmd...: runs cmd, sets WALL (s), RC, NOTE.
# Success = exit 0 and (if EXPECT_COUNT > 0) that many stdout lines match the regex.
timed() {
  local to=$1 re=$2 cnt=$3 t0 t1 got
  shift 3
  t0=$EPOCHREALTIME
  if timeout -k 5 "$to" "$@" >"$WORK/run.out" 2>"$WORK/run.err" </dev/null; then RC=0; else RC=$?; fi
  t1=$EPOCHREALTIME
  WALL=$(awk -v a="$(usec "$t0")" -v b="$(usec "$t1")" 'BEGIN { printf "%.6f", (b - a) / 1e6 }')
  NOTE=
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    NOTE="timed out after ${to}s"
  elif [ "$RC" -ne 0 ]; then
    NOTE="exit $RC: $(grep -v '^\s*$' "$WORK/run.err" | tail -n 2 | tr '\n' ' ' | cut -c1-300)"
  elif [ "$cnt" -gt 0 ]; then
    got=$(grep -c -E "$re" "$WORK/run.out" || true)
    if [ "$got" -ne "$cnt" ]; then
      RC=1
      NOTE="exit 0 but $got of $cnt expected output lines"
    fi
  fi
}

ok_json() { [ "$RC" -eq 0 ] && echo true || echo false; }

# Rotate the contender order run by run: run r starts with contender (r-1) mod k.
rotated() {
  local r=$1; shift
  local a=("$@") k=$# i
  for ((i = 0; i < k; i++)); do echo "${a[$(((r - 1 + i) % k))]}"; done
}

# cpu_job NAME LAUNCHER-ARGS... PROGRAM: run the job in a cpuacct cgroup of its own (v1), set
# (output checked as `timed` does for CPU_JOB_RE, CPU_JOB_N lines; default ' ok$', 64)
# WALL, RC, NOTE like `timed`, and CPU_NS: the CPU time of the whole job (every process in
# it; the launcher enters it through into_cgroup, so nothing of the harness's own start is
# in it). With a writable cpuacct hierarchy each rank is started through into_cgroup, which
# moves it into a second cgroup before it execs PROGRAM: then CPU_NS is what the process
# manager's own processes spent (creating each rank included, up to its move) and
# RANKS_NS what the ranks spent from then on. Without one: /usr/bin/time's children
# user+sys (every process of the job is reaped along the chain, so it adds up to the same)
# in CPU_NS, RANKS_NS empty.
CG_ROOT=/sys/fs/cgroup/cpuacct
cpu_job() {
  local name=$1 cg rk
  shift
  local prog=${!#} n=$(($# - 1))
  CPU_NS= RANKS_NS=
  cg=$CG_ROOT/libi-bench-$$-$name
  rk=$cg-ranks
  if [ -w "$CG_ROOT" ] && mkdir "$cg" 2>/dev/null && mkdir "$rk" 2>/dev/null; then
    timed 120 "${CPU_JOB_RE:- ok\$}" "${CPU_JOB_N:-64}" "$WORK/into_cgroup" "$cg" \
      "${@:1:$n}" "$WORK/into_cgroup" "$rk" "$prog"
    CPU_NS=$(cat "$cg/cpuacct.usage" 2>/dev/null || echo)
    RANKS_NS=$(cat "$rk/cpuacct.usage" 2>/dev/null || echo)
    rmdir "$rk" "$cg" 2>/dev/null || true
  else
    rmdir "$cg" 2>/dev/null || true
    timed 120 "${CPU_JOB_RE:- ok\$}" "${CPU_JOB_N:-64}" /usr/bin/time -f 'time_cpu %U %S' -o "$WORK/cpu.time" "$@"
    CPU_NS=$(awk '/^time_cpu/ {printf "%.0f", ($2 + $3) * 1e9}' "$WORK/cpu.time" 2>/dev/null || echo)
  fi
}

# build_into_cgroup: bench/into_cgroup.c as $WORK/into_cgroup, without the C library where
# that builds and runs (x86-64: its exec and move are the harness's error, which this keeps
# small), else static, else dynamic. INTO_CGROUP_LIBC=1: the C library version (to compare).
build_into_cgroup() {
  local out=$WORK/into_cgroup rc=0
  if [ "${INTO_CGROUP_LIBC:-0}" != 1 ] && cc -O2 -static -nostdlib -ffreestanding -fno-stack-protector -fno-tree-loop-distribute-patterns \
    -fno-pie -no-pie -DINTO_CGROUP_NOLIBC -o "$out" bench/into_cgroup.c 2>/dev/null; then
    "$out" 2>/dev/null || rc=$?
    [ "$rc" -eq 2 ] && return 0
  fi
  cc -O2 -static -o "$out" bench/into_cgroup.c 2>/dev/null || cc -O2 -o "$out" bench/into_cgroup.c
}

# cpu_opts DEFAULT_RUNS HELP_LINES MIN MAX "$@": the command line of bench/cpu-ab.sh and
# bench/cpu-split.sh: options -r RUNS, -n NP, -p PROGRAM, -b BUSY, then MIN to MAX operands
# (MAX empty: no limit). Sets RUNS (DEFAULT_RUNS), NP (64), PROG (empty), BUSY (0; see
# busy_start) and OPERANDS (an array). On a bad command line, prints HELP_LINES (a sed range)
# of the calling script and exits 2.
cpu_opts() {
  local help=$2 min=$3 max=$4 o OPTIND=1
  RUNS=$1 NP=64 PROG= BUSY=0
  shift 4
  while getopts "r:n:p:b:" o; do
    case $o in
      r) RUNS=$OPTARG ;;
      n) NP=$OPTARG ;;
      p) PROG=$OPTARG ;;
      b) BUSY=$OPTARG ;;
      *) cpu_usage "$help" ;;
    esac
  done
  shift $((OPTIND - 1))
  OPERANDS=("$@")
  case $BUSY in
    '' | *[!0-9]*) cpu_usage "$help" ;;
  esac
  if [ $# -lt "$min" ] || { [ -n "$max" ] && [ $# -gt "$max" ]; }; then
    cpu_usage "$help"
  fi
}
# cpu_usage LINES: print LINES (a sed range) of the calling script, its help, and exit 2.
cpu_usage() {
  sed -n "${1}p" "$0"
  exit 2
}

# busy_start: start $BUSY processes that only spin (a shell loop each) until the script
# exits: the measurement then runs against CPU contention, as a job's own busy-polling ranks
# make it (MPICH's, between their PMI calls). Not started when BUSY is 0.
BUSY_PIDS=()
busy_start() {
  local i
  for ((i = 0; i < BUSY; i++)); do
    sh -c 'while :; do :; done' &
    BUSY_PIDS+=($!)
  done
  [ "$BUSY" -eq 0 ] || trap busy_stop EXIT
}
busy_stop() {
  [ ${#BUSY_PIDS[@]} -eq 0 ] || kill "${BUSY_PIDS[@]}" 2>/dev/null || true
  BUSY_PIDS=()
}
