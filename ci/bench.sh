#!/usr/bin/env bash
# Benchmarks: libi-mpiexec side by side with mpiexec.hydra and srun --mpi=pmi2, with plots.
# Writes bench/results.md (tables, ratios libi/other, targets, machine), bench/raw.json (every
# run) and bench/*.png + bench/*.svg. Run as root on Debian 12 (installs packages with apt,
# matplotlib with pip into a venv under the target dir). Not part of the test suite.
#
#   ci/bench.sh                 all cases (~15-20 min on a 2-core VM)
#   BENCH_QUICK=1 ci/bench.sh   smoke run: fewer sizes
#   ci/bench.sh launch hello    only these cases (launch hello pmi ssh mem targets)
#   ci/bench.sh targets         only the "Targets of issue 20" table (~2 min): updates that
#                               section of bench/results.md, leaves the rest of it alone
#   ci/bench.sh launch-model    only the launch model against 32 ssh namespace hosts (~8 min;
#                               not part of the default run): its own section of results.md
#
# Cases (each one a separate process: a failing case is recorded and the others still run;
# the contenders alternate run by run, each value is the median of BENCH_RUNS runs):
#   launch  -n N hostname, N = 1 8 64 256: libi vs hydra (pure launch cost)
#   hello   MPICH hello (Init/Allreduce/Barrier/Finalize), N = 2 8 32 64: libi, hydra, srun
#           (srun: a private single-node Slurm, run through ci/with-slurm.sh, or ci/slurm.sh
#           up/down; "n/a" with the reason when there is none or it fails)
#   pmi     tests/programs/pmi_exchange.c (light PMI-1 client, 64-byte keys), N = 256 1024 4096:
#           libi over 64 simulated nodes (-launcher fork) vs hydra on one node; two variants:
#           "fence" (put + fence + fence, no gets) and "gets" (every rank gets all N keys, O(N^2)
#           round trips, only up to BENCH_PMI_GETS_MAX); libi's fence times from --report
#   ssh     8 network-namespace hosts over real ssh: launch time per tree shape (greedy,
#           kary:2, kary:16, flat), measured (--report) and modeled after calibration
#   mem     peak RSS of the front end and of the NLA / hydra proxy serving 64 ranks (VmHWM
#           sampled from /proc every 50 ms; /usr/bin/time's max RSS of the front end kept too)
#   launch-model (not in the default run; ~8 min) the launch model against real launches:
#           BENCH_LM_HOSTS (32) namespace hosts over ssh; every shape (greedy flat kary:2
#           kary:4 kary:8 kary:16 binomial chain) at BENCH_LM_SIZES hosts, BENCH_LM_RUNS runs
#           each (shapes alternating); `libi-tree calibrate` fits one model to every node of
#           every run (shared cores = nproc, held setups) and gives R² of measured against
#           modeled; then, at the largest size, greedy planned with the fitted model against
#           greedy with the default constants, flat and the two best k-ary of the first phase
#           (BENCH_LM_CMP_RUNS runs each, alternating). Each run waits (up to
#           BENCH_LM_QUIET_WAIT s) for the machine to be quiet first. Writes the section
#           between launch-model markers of results.md, bench/launch-model.{svg,png} and
#           bench/data/launch-model.json; leaves the rest of results.md alone.
#   targets the four ratios of issue 20, each the median of BENCH_TARGET_RUNS (>= 10) runs,
#           contenders alternating: -n 64 hostname (bench/spawnfloor.c, the physical floor,
#           vs libi vs hydra); -n 1 true (libi vs hydra); the process manager's own CPU time
#           in MPICH hello n=64, two ways from the same runs (each job in a cgroup of its
#           own, cpuacct: its total minus the CPU each rank reports for itself after
#           MPI_Finalize; and what is left in that cgroup when each rank moves itself into a
#           second one before exec, bench/into_cgroup.c; with bench/pmfloor.c, a minimal
#           one-process PMI-1 server in C, as the floor); for scale, the same own-processes
#           CPU for 64 ranks of /bin/true with spawnfloor as the floor (and for 1 rank: what
#           a job costs whatever its size; and for 1000 ranks on the node, at most 5 runs:
#           whether a rank's start costs more the more ranks the agent already holds), and
#           what is left
#           beyond that against bench/pmifloor.c answering 64 x 15 lock-step PMI-1 requests
#           (the floor of the requests themselves), and the CPU 64 ranks of a static
#           program have used when main() starts (bench/prestart.c: the child's work
#           between fork or clone and exec, which the first way counts as the ranks');
#           NLA vs hydra proxy
#           peak RSS serving 64 ranks of `sleep 1` (and, for scale, 256 ranks: what each
#           added rank costs). Written to results.md between targets markers.
#
# Environment:
#   BENCH_RUNS=5            runs per contender and size (median reported)
#   BENCH_TARGET_RUNS=11    runs per contender of the targets case (at least 10)
#   BENCH_CPU_RUNS=21       runs per contender of its MPICH hello CPU measure (noisier: the
#                           process managers' CPU moves with the 64 ranks' busy-polling)
#   BENCH_QUICK=1           fewer sizes
#   BENCH_OUT=bench         output directory
#   BENCH_PMI_GETS_MAX=256  largest N of the pmi "gets" variant (1024 takes ~1 min per run here)
#   BENCH_PMI_HYDRA_MAX=4096  largest N hydra is tried at in the pmi case
#   BENCH_SSH_HOSTS=8       namespace hosts of the ssh case
#   BENCH_LM_HOSTS=32       namespace hosts of the launch-model case
#   BENCH_LM_SIZES="4 8 16 32"  host counts of its first phase (each <= BENCH_LM_HOSTS)
#   BENCH_LM_RUNS=3         runs per shape and size; BENCH_LM_CMP_RUNS=15 in its second phase
#   BENCH_LM_QUIET_WAIT=10  seconds a run waits for no other runnable process (then runs anyway,
#                           and the record says how busy the machine was)
#   BENCH_LOCK_WAIT=120     seconds to wait for another run (ci/test.sh) to release the netns
#                           hosts / the Slurm cluster before the case gives up (recorded)
#   CARGO_TARGET_DIR        honoured (binaries from $CARGO_TARGET_DIR/release)
#   LIBI_SLURM_DIR/_CTLD_PORT/_SLURMD_PORT  the benchmark's own Slurm (default
#                           /tmp/libi-bench-slurm, ports 6827/6828; stopped at the end)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
ROOT=$PWD
SELF=$ROOT/ci/bench.sh
RUNS=${BENCH_RUNS:-5}
QUICK=${BENCH_QUICK:-0}
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TGT" in /*) ;; *) TGT=$ROOT/$TGT ;; esac
REL=$TGT/release
LIBI=$REL/libi-mpiexec
TREE=$REL/libi-tree
PMI_GETS_MAX=${BENCH_PMI_GETS_MAX:-256}
PMI_HYDRA_MAX=${BENCH_PMI_HYDRA_MAX:-4096}
SSH_HOSTS=${BENCH_SSH_HOSTS:-8}
export LIBI_SLURM_DIR=${LIBI_SLURM_DIR:-/tmp/libi-bench-slurm}
export LIBI_SLURM_CTLD_PORT=${LIBI_SLURM_CTLD_PORT:-6827}
export LIBI_SLURM_SLURMD_PORT=${LIBI_SLURM_SLURMD_PORT:-6828}
export LIBI_SLURM_CPUS=${LIBI_SLURM_CPUS:-64}

log() { echo "bench: $*" >&2; }

# ---------------------------------------------------------------- helpers (used by cases)

# JSON string literal
jstr() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/ }
  s=${s//$'\t'/ }
  s=$(printf '%s' "$s" | tr -d '\000-\037')
  printf '"%s"' "$s"
}

# rec CASE VARIANT N CONTENDER RUN WALL_S OK NOTE [EXTRA_JSON_OBJECT]
rec() {
  local extra=${9:-null}
  printf '{"case":%s,"variant":%s,"n":%s,"contender":%s,"run":%s,"wall":%s,"ok":%s,"note":%s,"extra":%s}\n' \
    "$(jstr "$1")" "$(jstr "$2")" "$3" "$(jstr "$4")" "$5" "${6:-null}" "$7" "$(jstr "$8")" "$extra" \
    >>"$WORK/raw.jsonl"
}

. "$ROOT/ci/bench-lib.sh"

# compare CASE VARIANT N TIMEOUT REGEX COUNT CONTENDER...: for every contender C the
# function cmd_C N prints nothing and sets CMD (array). Failed contenders are skipped for the
# rest of the runs (one failure recorded per run skipped).
declare -A FAILED
compare() {
  local cs=$1 var=$2 n=$3 to=$4 re=$5 cnt=$6
  shift 6
  local r c
  for r in $(seq 1 "$RUNS"); do
    for c in $(rotated "$r" "$@"); do
      if [ -n "${FAILED[$cs/$var/$n/$c]:-}" ]; then
        rec "$cs" "$var" "$n" "$c" "$r" null false "skipped: ${FAILED[$cs/$var/$n/$c]}"
        continue
      fi
      "cmd_$c" "$n" "$r"
      timed "$to" "$re" "$cnt" "${CMD[@]}"
      local extra=null
      if [ "$RC" -eq 0 ] && [ -n "${REPORT:-}" ] && [ -s "$REPORT" ]; then
        extra=$("$PY" "$ROOT/ci/bench_plot.py" report "$REPORT" 2>/dev/null || echo null)
      fi
      rec "$cs" "$var" "$n" "$c" "$r" "$WALL" "$(ok_json)" "$NOTE" "$extra"
      [ "$RC" -eq 0 ] || { FAILED[$cs/$var/$n/$c]=$NOTE; log "$cs $var n=$n $c run $r: FAILED: $NOTE"; }
      REPORT=
    done
  done
  log "$cs $var n=$n done"
}

# ---------------------------------------------------------------- cases

case_launch() {
  local sizes=(1 8 64 256)
  [ "$QUICK" = 1 ] && sizes=(1 64)
  cmd_libi() { CMD=("$LIBI" -n "$1" hostname); }
  cmd_hydra() { CMD=(mpiexec.hydra -n "$1" hostname); }
  local n
  for n in "${sizes[@]}"; do compare launch hostname "$n" 120 '.' "$n" libi hydra; done
}

slurm_ok=
slurm_reason=
slurm_start() {
  if ! command -v srun >/dev/null; then
    slurm_reason="srun not installed"
    return 1
  fi
  if [ -f "$ROOT/ci/slurm.sh" ]; then
    if ! timeout 180 bash "$ROOT/ci/slurm.sh" up >"$WORK/slurm-up.log" 2>&1; then
      slurm_reason="ci/slurm.sh up failed: $(tail -n 2 "$WORK/slurm-up.log" | tr '\n' ' ' | cut -c1-200)"
      return 1
    fi
    export SLURM_CONF=$LIBI_SLURM_DIR/slurm.conf
    if ! timeout 60 srun --mpi=pmi2 -n 1 true >"$WORK/slurm-check.log" 2>&1; then
      slurm_reason="srun --mpi=pmi2 -n 1 true failed: $(tail -n 2 "$WORK/slurm-check.log" | tr '\n' ' ' | cut -c1-200)"
      return 1
    fi
    return 0
  fi
  slurm_reason="ci/slurm.sh not found (no single-node Slurm to run srun in)"
  return 1
}
slurm_stop() { [ -f "$ROOT/ci/slurm.sh" ] && timeout 120 bash "$ROOT/ci/slurm.sh" down >/dev/null 2>&1 || true; }

case_hello() {
  local sizes=(2 8 32 64) n cs=(libi hydra)
  [ "$QUICK" = 1 ] && sizes=(2 8)
  # Preferred: the whole case inside ci/with-slurm.sh (brings our Slurm up, always down again).
  if [ -z "${BENCH_IN_SLURM:-}" ] && [ -f "$ROOT/ci/with-slurm.sh" ] && command -v srun >/dev/null; then
    local rc=0
    if ! flock -w "${BENCH_LOCK_WAIT:-120}" /run/lock/libi-ci-slurm-session.lock true 2>/dev/null; then
      slurm_reason="another run held the Slurm session lock (ci/with-slurm.sh) for over ${BENCH_LOCK_WAIT:-120} s"
    else
      BENCH_IN_SLURM=1 timeout -k 10 1500 bash "$ROOT/ci/with-slurm.sh" -- bash "$SELF" __case hello || rc=$?
      [ "$rc" -ne 0 ] || return 0
      if grep -q '"case":"hello"' "$WORK/raw.jsonl"; then return "$rc"; fi
      slurm_reason="ci/with-slurm.sh failed (exit $rc) before the case ran"
    fi
    export BENCH_IN_SLURM=none
  fi
  cmd_libi() { CMD=("$LIBI" -n "$1" "$WORK/hello"); }
  cmd_hydra() { CMD=(mpiexec.hydra -n "$1" "$WORK/hello"); }
  cmd_srun() { CMD=(srun --mpi=pmi2 -n "$1" "$WORK/hello"); }
  if [ "${BENCH_IN_SLURM:-}" = 1 ]; then
    # inside ci/with-slurm.sh
    if timeout 60 srun --mpi=pmi2 -n 1 true >"$WORK/slurm-check.log" 2>&1; then
      slurm_ok=1
    else
      slurm_reason="srun --mpi=pmi2 -n 1 true failed under ci/with-slurm.sh: $(tail -n 2 "$WORK/slurm-check.log" | tr '\n' ' ' | cut -c1-200)"
    fi
  elif [ -n "$slurm_reason" ]; then
    :   # with-slurm.sh was there and failed: say why, do not try again
  elif slurm_start; then
    slurm_ok=1
    trap slurm_stop EXIT
  fi
  if [ -n "$slurm_ok" ]; then
    cs+=(srun)
  else
    log "hello: srun n/a: $slurm_reason"
    for n in "${sizes[@]}"; do rec hello mpich "$n" srun 0 null false "n/a: $slurm_reason"; done
  fi
  for n in "${sizes[@]}"; do compare hello mpich "$n" 180 ' ok$' "$n" "${cs[@]}"; done
}

case_pmi() {
  local sizes=(256 1024 4096) n var
  [ "$QUICK" = 1 ] && sizes=(256 1024)
  local nofile
  nofile=$(ulimit -n)
  log "pmi: ulimit -n $nofile, ulimit -u $(ulimit -u), pid_max $(cat /proc/sys/kernel/pid_max)"
  cmd_libi() {
    local k=$(($1 / 64)) hosts
    hosts=$(seq -f "n%g:$k" -s, 1 64)
    REPORT=$WORK/pmi-$var-$1-$2.json
    CMD=("$LIBI" -launcher fork -hosts "$hosts" -n "$1" --report "$REPORT" "$WORK/pmi_exchange" "$REPEAT" nomiss)
  }
  cmd_hydra() { CMD=(mpiexec.hydra -n "$1" "$WORK/pmi_exchange" "$REPEAT" nomiss); }
  for var in fence gets; do
    if [ "$var" = fence ]; then REPEAT=0; else REPEAT=1; fi
    for n in "${sizes[@]}"; do
      if [ "$var" = gets ] && [ "$n" -gt "$PMI_GETS_MAX" ]; then
        rec pmi "$var" "$n" libi 0 null false "not run: N > BENCH_PMI_GETS_MAX=$PMI_GETS_MAX (N^2 = $((n * n)) get round trips)"
        rec pmi "$var" "$n" hydra 0 null false "not run: N > BENCH_PMI_GETS_MAX=$PMI_GETS_MAX (N^2 = $((n * n)) get round trips)"
        continue
      fi
      local cs=(libi hydra)
      if [ "$n" -gt "$PMI_HYDRA_MAX" ]; then
        cs=(libi)
        rec pmi "$var" "$n" hydra 0 null false "not run: N > BENCH_PMI_HYDRA_MAX=$PMI_HYDRA_MAX"
      fi
      # a contender that failed at a smaller N is not tried at larger ones
      local c keep=()
      for c in "${cs[@]}"; do
        if [ -n "${PMI_GAVE_UP[$var/$c]:-}" ]; then
          rec pmi "$var" "$n" "$c" 0 null false "not run: failed at N=${PMI_GAVE_UP[$var/$c]}"
        else
          keep+=("$c")
        fi
      done
      [ ${#keep[@]} -gt 0 ] || continue
      compare pmi "$var" "$n" $((60 + n / 16)) '^rank [0-9]+ of [0-9]+ ok' "$n" "${keep[@]}"
      for c in "${keep[@]}"; do [ -z "${FAILED[pmi/$var/$n/$c]:-}" ] || PMI_GAVE_UP[$var/$c]=$n; done
    done
  done
}
declare -A PMI_GAVE_UP

case_ssh() {
  if [ -z "${LIBI_TEST_HOSTS:-}" ]; then
    # with-netns-hosts.sh waits up to an hour for another run (e.g. ci/test.sh) to let go of the
    # hosts; a benchmark gives up after BENCH_LOCK_WAIT seconds instead.
    if ! flock -w "${BENCH_LOCK_WAIT:-120}" /run/lock/libi-netns-session.lock true 2>/dev/null; then
      rec ssh launch "$SSH_HOSTS" greedy 0 null false "n/a: another run held the netns hosts (ci/with-netns-hosts.sh) for over ${BENCH_LOCK_WAIT:-120} s"
      return 1
    fi
    exec bash "$ROOT/ci/with-netns-hosts.sh" "$SSH_HOSTS" -- bash "$SELF" __case ssh
  fi
  local shapes=(greedy kary:2 kary:16 flat) nh
  nh=$(echo "$LIBI_TEST_HOSTS" | tr ',' '\n' | wc -l)
  for s in "${shapes[@]}"; do
    eval "cmd_${s/:/_}() { REPORT=\$WORK/ssh-${s/:/_}-\$2.json; CMD=(\"\$LIBI\" -launcher ssh -launcher-exec \"\$LIBI_TEST_SSH\" -hosts \"\$LIBI_TEST_HOSTS\" --tree $s --report \"\$REPORT\" -n \"\$1\" true); }"
  done
  compare ssh launch "$nh" 120 '' 0 greedy kary_2 kary_16 flat
  local f fit seq rem plan
  f=$WORK/ssh-greedy-1.json
  if [ ! -s "$f" ]; then
    rec ssh model "$nh" calibration 0 null false "no greedy report to calibrate from"
    return 0
  fi
  cp "$f" "$WORK/ssh-greedy.report.json"
  "$TREE" plot "$f" -o "$WORK/launch-greedy.svg" >/dev/null 2>&1 || true
  if ! fit=$("$TREE" calibrate "$f" --cores off --hold no --format json 2>"$WORK/cal.err"); then
    rec ssh model "$nh" calibration 0 null false "libi-tree calibrate failed: $(tail -n1 "$WORK/cal.err")"
    return 0
  fi
  seq=$("$PY" -c 'import json,sys; f=json.loads(sys.argv[1]); s=f.get("seq"); print(max(s, 0.0) if s is not None else 0.007)' "$fit")
  rem=$("$PY" -c 'import json,sys; print(max(json.loads(sys.argv[1])["rem"], 0.0))' "$fit")
  plan=$("$TREE" plan --nodes $((nh + 1)) --seq "$seq" --rem "$rem" --format json)
  rec ssh model "$nh" calibration 0 null true "SEQ/REM fitted on greedy run 1 (negative values clamped to 0)" \
    "{\"fit\":$fit,\"seq_used\":$seq,\"rem_used\":$rem,\"plan\":$plan}"
}

# ---- launch-model: the launch model against real ssh launches

# Wait (up to BENCH_LM_QUIET_WAIT s) until nothing else is runnable: procs_running of
# /proc/stat at most 2 (this reader and a passing kernel thread) in 5 samples 0.1 s apart.
# Sets BUSY: the largest procs_running seen in the last window.
quiet() {
  local deadline=$((SECONDS + ${BENCH_LM_QUIET_WAIT:-10})) k r
  while :; do
    BUSY=0
    for k in 1 2 3 4 5; do
      r=$(awk '/^procs_running/ {print $2}' /proc/stat)
      [ "$r" -gt "$BUSY" ] && BUSY=$r
      sleep 0.1
    done
    [ "$BUSY" -le 2 ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || return 0
    sleep 0.5
  done
}

# lm_run PHASE N SHAPE LABEL RUN [--launch-model M]: one ssh launch into the first N hosts.
lm_run() {
  local phase=$1 n=$2 shape=$3 lbl=$4 r=$5 hosts f
  shift 5
  hosts=$(echo "$LIBI_TEST_HOSTS" | tr ',' '\n' | head -n "$n" | paste -sd,)
  f=$WORK/lm/$phase-${lbl//:/}-$n-$r.json
  quiet
  local busy=$BUSY load
  load=$(cut -d' ' -f1 /proc/loadavg)
  timed 120 '' 0 "$LIBI" -launcher ssh -launcher-exec "$LIBI_TEST_SSH" -hosts "$hosts" --tree "$shape" \
    --report "$f" "$@" -n "$n" true
  local lt=null
  if [ "$RC" -eq 0 ] && [ -s "$f" ]; then
    lt=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["launch_time"])' "$f" 2>/dev/null || echo null)
  else
    rm -f "$f"
  fi
  rec launch-model "$phase" "$n" "$lbl" "$r" "$WALL" "$(ok_json)" "$NOTE" \
    "{\"launch_time\":$lt,\"busy_before\":$busy,\"load1\":$load,\"file\":$(jstr "${f##*/}")}"
}

case_launch_model() {
  local nh=${BENCH_LM_HOSTS:-32}
  if [ -z "${LIBI_TEST_HOSTS:-}" ]; then
    if ! flock -w "${BENCH_LOCK_WAIT:-120}" /run/lock/libi-netns-session.lock true 2>/dev/null; then
      rec launch-model shapes "$nh" greedy 0 null false "n/a: another run held the netns hosts (ci/with-netns-hosts.sh) for over ${BENCH_LOCK_WAIT:-120} s"
      return 1
    fi
    exec bash "$ROOT/ci/with-netns-hosts.sh" "$nh" -- bash "$SELF" __case launch-model
  fi
  local sizes shapes=(greedy flat kary:2 kary:4 kary:8 kary:16 binomial chain) runs=${BENCH_LM_RUNS:-3}
  read -r -a sizes <<<"${BENCH_LM_SIZES:-4 8 16 32}"
  [ "$QUICK" = 1 ] && { sizes=(8 32); runs=1; }
  mkdir -p "$WORK/lm"
  local n r s big=0
  for n in "${sizes[@]}"; do
    [ "$n" -le "$nh" ] || { log "launch-model: $n hosts > BENCH_LM_HOSTS=$nh, skipped"; continue; }
    [ "$n" -gt "$big" ] && big=$n
    for r in $(seq 1 "$runs"); do
      for s in $(rotated "$r" "${shapes[@]}"); do lm_run shapes "$n" "$s" "$s" "$r"; done
    done
    log "launch-model: $n hosts done (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
  # One model for every node of every run (runs far off their shape's median are left out,
  # see bench_plot.py lm-select), on the machine's cores, setups held as the driver does.
  local files
  mapfile -t files < <("$PY" "$ROOT/ci/bench_plot.py" lm-select --work "$WORK")
  if [ ${#files[@]} -eq 0 ]; then
    rec launch-model fit "$big" calibrate 0 null false "no launch report to fit"
    return 1
  fi
  if ! "$TREE" calibrate --cores "$(nproc)" --hold yes --format json "${files[@]}" >"$WORK/lm-fit.json" 2>"$WORK/lm-fit.err"; then
    rec launch-model fit "$big" calibrate 0 null false "libi-tree calibrate failed: $(tail -n1 "$WORK/lm-fit.err")"
    return 1
  fi
  "$TREE" calibrate --cores fit --hold yes --format json "${files[@]}" >"$WORK/lm-fit-cores.json" 2>/dev/null || true
  "$TREE" calibrate --cores "$(nproc)" --hold yes "${files[@]}" >&2 || true
  "$TREE" calibrate --cores "$(nproc)" --hold yes --accept no --format json "${files[@]}" >"$WORK/lm-fit-noaccept.json" 2>/dev/null || true
  "$TREE" calibrate --cores off --hold no --accept no --format json "${files[@]}" >"$WORK/lm-fit-paper.json" 2>/dev/null || true
  # Greedy planned with the fitted model against the others at the largest size.
  local model best
  model=$("$PY" "$ROOT/ci/bench_plot.py" lm-model --work "$WORK")
  best=$("$PY" "$ROOT/ci/bench_plot.py" lm-best-kary --work "$WORK" --n "$big")
  echo "$model" >"$WORK/lm-model.txt"
  log "launch-model: fitted model $model; best k-ary at $big hosts: $best"
  local cmp=(greedy-fit greedy flat) c
  [ "$best" = flat ] || read -r -a c <<<"$best"
  [ "$best" = flat ] || cmp+=("${c[@]}")
  for r in $(seq 1 "${BENCH_LM_CMP_RUNS:-15}"); do
    for c in $(rotated "$r" "${cmp[@]}"); do
      if [ "$c" = greedy-fit ]; then
        lm_run compare "$big" greedy greedy-fit "$r" --launch-model "$model"
      else
        lm_run compare "$big" "$c" "$c" "$r"
      fi
    done
  done
  log "launch-model: done (load $(cut -d' ' -f1-3 /proc/loadavg))"
}

# NLA / hydra proxy peak RSS while 64 ranks run `sleep 2`.
descendants() { # pid: all descendant pids
  local p
  for p in $(cat /proc/"$1"/task/*/children 2>/dev/null); do echo "$p"; descendants "$p"; done
}
case_mem() {
  local r c
  for r in $(seq 1 "$RUNS"); do
    for c in $(rotated "$r" libi hydra); do
      local fe cmd agent fecomm
      if [ "$c" = libi ]; then
        cmd=("$LIBI" -n 64 sleep 2); agent=libi-nla; fecomm=libi-mpiexec
      else
        cmd=(mpiexec.hydra -n 64 sleep 2); agent=hydra_pmi_proxy; fecomm=mpiexec.hydra
      fi
      /usr/bin/time -f '%M' -o "$WORK/time.out" "${cmd[@]}" >/dev/null 2>"$WORK/mem.err" </dev/null &
      local tp=$! hwm=0 fehwm=0 nag=0 p v comm t0=$SECONDS
      while kill -0 "$tp" 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do
        for p in $(descendants "$tp"); do
          comm=$(cat /proc/"$p"/comm 2>/dev/null || true)
          [ "$comm" = "$agent" ] || [ "$comm" = "$fecomm" ] || continue
          v=$(awk '/^VmHWM:/ {print $2}' /proc/"$p"/status 2>/dev/null || true)
          [ -n "$v" ] || continue
          if [ "$comm" = "$agent" ]; then
            nag=1
            if [ "$v" -gt "$hwm" ]; then hwm=$v; fi
          elif [ "$v" -gt "$fehwm" ]; then
            fehwm=$v
          fi
        done
        sleep 0.05
      done
      local rc=0
      wait "$tp" || rc=$?
      fe=$(tail -n1 "$WORK/time.out" 2>/dev/null || echo)
      if [ "$rc" -eq 0 ] && [[ "$fe" =~ ^[0-9]+$ ]]; then
        # VmHWM sampled like the agent's; /usr/bin/time's max RSS kept next to it
        [ "$fehwm" -gt 0 ] || fehwm=$fe
        rec mem frontend 64 "$c" "$r" null true "" "{\"rss_kb\":$fehwm,\"time_maxrss_kb\":$fe}"
      else
        rec mem frontend 64 "$c" "$r" null false "exit $rc: $(tail -n2 "$WORK/mem.err" | tr '\n' ' ' | cut -c1-200)"
      fi
      if [ "$nag" = 1 ] && [ "$hwm" -gt 0 ]; then
        rec mem agent 64 "$c" "$r" null true "$agent VmHWM" "{\"rss_kb\":$hwm}"
      else
        rec mem agent 64 "$c" "$r" null false "no $agent process seen (or no VmHWM in /proc)"
      fi
    done
  done
  log "mem done"
}

# ---- targets of issue 20

# peak_rss CMD...: run it, sample the VmHWM of its agent (libi-nla / hydra_pmi_proxy) every
# 20 ms; sets HWM (kB, 0: none seen) and RC.
peak_rss() {
  local agent=$1 p v comm t0=$SECONDS
  shift
  "$@" >/dev/null 2>"$WORK/rss.err" </dev/null &
  local tp=$!
  HWM=0
  while kill -0 "$tp" 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do
    for p in $(descendants "$tp"); do
      comm=$(cat /proc/"$p"/comm 2>/dev/null || true)
      [ "$comm" = "$agent" ] || continue
      v=$(awk '/^VmHWM:/ {print $2}' /proc/"$p"/status 2>/dev/null || true)
      if [ -n "$v" ] && [ "$v" -gt "$HWM" ]; then HWM=$v; fi
    done
    sleep 0.02
  done
  RC=0
  wait "$tp" || RC=$?
}

# rss_runs VARIANT N RUNS: RUNS alternating runs of `-n N sleep 1`, each recording the
# peak RSS of its agent (libi-nla / hydra_pmi_proxy) as targets VARIANT.
rss_runs() {
  local variant=$1 n=$2 r c
  for r in $(seq 1 "$3"); do
    for c in $(rotated "$r" libi hydra); do
      case $c in
        libi) peak_rss libi-nla "$LIBI" -n "$n" sleep 1 ;;
        hydra) peak_rss hydra_pmi_proxy mpiexec.hydra -n "$n" sleep 1 ;;
      esac
      if [ "$RC" -eq 0 ] && [ "$HWM" -gt 0 ]; then
        rec targets "$variant" "$n" "$c" "$r" null true "" "{\"rss_kb\":$HWM}"
      else
        rec targets "$variant" "$n" "$c" "$r" null false "exit $RC, agent VmHWM $HWM kB"
      fi
    done
  done
}

case_targets() {
  local runs=${BENCH_TARGET_RUNS:-11} cpu_runs=${BENCH_CPU_RUNS:-21} r c
  [ "$runs" -ge 10 ] || runs=10
  [ "$cpu_runs" -ge "$runs" ] || cpu_runs=$runs
  log "targets: $runs runs per contender, load $(cut -d' ' -f1-3 /proc/loadavg)"
  # 1. -n 64 hostname: the floor, libi, hydra
  for r in $(seq 1 "$runs"); do
    for c in $(rotated "$r" floor libi hydra); do
      case $c in
        floor) timed 60 '.' 64 "$WORK/spawnfloor" 64 hostname ;;
        libi) timed 60 '.' 64 "$LIBI" -n 64 hostname ;;
        hydra) timed 60 '.' 64 mpiexec.hydra -n 64 hostname ;;
      esac
      rec targets hostname64 64 "$c" "$r" "$WALL" "$(ok_json)" "$NOTE"
    done
  done
  log "targets: -n 64 hostname done"
  # 2. -n 1 true
  for r in $(seq 1 "$runs"); do
    for c in $(rotated "$r" libi hydra); do
      case $c in
        libi) timed 60 '' 0 "$LIBI" -n 1 true ;;
        hydra) timed 60 '' 0 mpiexec.hydra -n 1 true ;;
      esac
      rec targets true1 1 "$c" "$r" "$WALL" "$(ok_json)" "$NOTE"
    done
  done
  log "targets: -n 1 true done"
  # 3. process manager CPU, MPICH hello n=64
  local how=cgroup
  [ -w "$CG_ROOT" ] || how="/usr/bin/time (no writable $CG_ROOT)"
  for r in $(seq 1 "$cpu_runs"); do
    for c in $(rotated "$r" floor libi hydra); do
      case $c in
        floor) cpu_job "$c-$r" "$WORK/pmfloor" -n 64 "$WORK/hello_cpu" ;;
        libi) cpu_job "$c-$r" "$LIBI" -n 64 "$WORK/hello_cpu" ;;
        hydra) cpu_job "$c-$r" mpiexec.hydra -n 64 "$WORK/hello_cpu" ;;
      esac
      local ranks_us extra=null
      ranks_us=$(awk '/^cpu_us / {s += $2; n++} END {if (n == 64) print s}' "$WORK/run.out")
      if [ "$RC" -eq 0 ] && [ -n "$CPU_NS" ] && [ -n "$ranks_us" ]; then
        local own=null job=$CPU_NS
        if [ -n "$RANKS_NS" ]; then
          job=$((CPU_NS + RANKS_NS))
          own=$(awk -v a="$CPU_NS" 'BEGIN {printf "%.3f", a / 1e6}')
        fi
        extra="{\"job_cpu_ms\":$(awk -v a="$job" 'BEGIN {printf "%.3f", a / 1e6}'),\"ranks_cpu_ms\":$(awk -v a="$ranks_us" 'BEGIN {printf "%.3f", a / 1e3}'),\"pm_cpu_ms\":$(awk -v a="$job" -v b="$ranks_us" 'BEGIN {printf "%.3f", a / 1e6 - b / 1e3}'),\"pm_own_cpu_ms\":$own,\"how\":$(jstr "$how")}"
      elif [ "$RC" -eq 0 ]; then
        RC=1
        NOTE="no job CPU time or not 64 cpu_us lines"
      fi
      rec targets hello64cpu 64 "$c" "$r" "$WALL" "$(ok_json)" "$NOTE" "$extra"
    done
  done
  log "targets: hello 64 CPU done"
  # 3b. the same accounting for 64 ranks of /bin/true: what creating and reaping the ranks
  # costs the process manager, against the floor (spawnfloor: one process that clones 64
  # children, each through into_cgroup, and waits for them). And what the harness itself
  # leaves in the job's cgroup: into_cgroup runs in each rank's process from its exec to its
  # move, charged to the process manager though neither process manager runs it. Measured by
  # starting it twice in a row (spawnfloor 64 into_cgroup H into_cgroup RANKS /bin/true): the
  # second one's exec, write and move are charged to H, as the first one's are to the job.
  if [ -w "$CG_ROOT" ]; then
    for r in $(seq 1 "$runs"); do
      for c in $(rotated "$r" floor libi hydra harness); do
        case $c in
          harness)
            local hc=$CG_ROOT/libi-bench-$$-into-cgroup-$r own=null
            if mkdir "$hc" 2>/dev/null; then
              CPU_JOB_N=0 cpu_job "$c-$r" "$WORK/spawnfloor" 64 "$WORK/into_cgroup" "$hc" /bin/true
              [ "$RC" -ne 0 ] || own=$(awk -v a="$(cat "$hc/cpuacct.usage" 2>/dev/null || echo)" 'BEGIN {if (a != "") printf "%.3f", a / 1e6; else print "null"}')
              rmdir "$hc" 2>/dev/null || true
            else
              RC=1 NOTE="cannot make $hc"
            fi
            rec targets harness64cpu 64 harness "$r" "$WALL" "$(ok_json)" "$NOTE" "{\"harness_cpu_ms\":$own}"
            continue
            ;;
          *) true_own_cpu true64cpu 64 "$c" "$r" ;;
        esac
      done
    done
    log "targets: true 64 CPU done"
    # for scale: one rank, what a job costs whatever its size (the process manager's own
    # processes starting, connecting and ending; the floor's one process)
    true_own_cpu_runs true1cpu 1 "$runs"
    # for scale: 1000 ranks on one node (a big SMP node), where what each rank's start costs
    # must not grow with the ranks started before it (at most 5 runs)
    true_own_cpu_runs true1000cpu 1000 $((runs < 5 ? runs : 5))
  fi
  # 3c. what a rank's self-report covers of each process manager's own work: the CPU a
  # (static) program has used when its main() starts, that is the child's work between fork
  # or clone and exec (the process manager's code) and the exec; spawnfloor's is the floor.
  # The "job minus ranks' report" row subtracts it from the job as the ranks' own.
  for r in $(seq 1 "$runs"); do
    for c in $(rotated "$r" floor libi hydra); do
      case $c in
        floor) timed 60 '^pre_us ' 64 "$WORK/spawnfloor" 64 "$WORK/prestart" ;;
        libi) timed 60 '^pre_us ' 64 "$LIBI" -n 64 "$WORK/prestart" ;;
        hydra) timed 60 '^pre_us ' 64 mpiexec.hydra -n 64 "$WORK/prestart" ;;
      esac
      local pre=null
      [ "$RC" -ne 0 ] || pre=$(awk '/^pre_us / {s += $2} END {printf "%.3f", s / 1e3}' "$WORK/run.out")
      rec targets prestart64 64 "$c" "$r" "$WALL" "$(ok_json)" "$NOTE" "{\"prestart_ms\":$pre}"
    done
  done
  log "targets: pre-start CPU done"
  # 3d. for scale, the floor of answering the requests: pmifloor (one epoll loop in C, one
  # recv and one send per request) answering 64 forked clients, 15 lock-step PMI-1 requests
  # each (MPICH hello n=64 makes ~14.5 per rank here)
  for r in $(seq 1 "$runs"); do
    local fl_out fl_ms
    fl_out=$("$WORK/pmifloor" 64 15 2>&1) && RC=0 || RC=$?
    fl_ms=$(echo "$fl_out" | awk '/^server_cpu_ms/ {print $2}')
    [ -n "$fl_ms" ] || { RC=1; fl_ms=null; }
    NOTE=$([ "$RC" -eq 0 ] && echo "" || echo "$fl_out")
    rec targets pmifloor64 64 floor "$r" null "$(ok_json)" "$NOTE" "{\"server_cpu_ms\":$fl_ms}"
  done
  log "targets: pmifloor done"
  # 4. agent peak RSS serving 64 ranks; for scale, at 256 (what each added rank costs)
  rss_runs rss64 64 "$runs"
  rss_runs rss256 256 $((runs < 5 ? runs : 5))
  log "targets: RSS done, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# true_own_cpu VARIANT N CONTENDER RUN: the own processes' CPU (cpu_job) of N ranks of
# /bin/true started by CONTENDER (floor: spawnfloor, libi, hydra), recorded as VARIANT.
true_own_cpu() {
  local variant=$1 n=$2 c=$3 r=$4 own=null
  case $c in
    floor) CPU_JOB_N=0 cpu_job "$c-$r" "$WORK/spawnfloor" "$n" /bin/true ;;
    libi) CPU_JOB_N=0 cpu_job "$c-$r" "$LIBI" -n "$n" /bin/true ;;
    hydra) CPU_JOB_N=0 cpu_job "$c-$r" mpiexec.hydra -n "$n" /bin/true ;;
  esac
  if [ "$RC" -eq 0 ] && [ -n "$CPU_NS" ] && [ -n "$RANKS_NS" ]; then
    own=$(awk -v a="$CPU_NS" 'BEGIN {printf "%.3f", a / 1e6}')
  fi
  rec targets "$variant" "$n" "$c" "$r" "$WALL" "$(ok_json)" "$NOTE" "{\"pm_own_cpu_ms\":$own}"
}

# true_own_cpu_runs VARIANT N RUNS: RUNS alternating runs of true_own_cpu (floor, libi,
# hydra).
true_own_cpu_runs() {
  local r c
  for r in $(seq 1 "$3"); do
    for c in $(rotated "$r" floor libi hydra); do
      true_own_cpu "$1" "$2" "$c" "$r"
    done
  done
  log "targets: true $2 CPU done"
}

# The "Targets of issue 20" table (markdown) from raw.jsonl.
targets_table() {
  "$PY" - "$WORK/raw.jsonl" "$1" "$2" <<'PYEOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in recs if r["case"] == "targets" and r["ok"]]
load_start, load_end = sys.argv[2], sys.argv[3]
def vals(var, c, key=None):
    out = []
    for r in recs:
        if r["variant"] == var and r["contender"] == c:
            out.append(r["wall"] * 1e3 if key is None else (r["extra"] or {}).get(key))
    return [v for v in out if v is not None]
def med(var, c, key=None):
    v = vals(var, c, key)
    return (statistics.median(v), len(v)) if v else (None, 0)
def f(x, unit=""):
    return "n/a" if x is None else f"{x:.1f}{unit}"
def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"
rows = []
fl, nf = med("hostname64", "floor"); us, nu = med("hostname64", "libi"); hy, nh = med("hostname64", "hydra")
rows.append(("`-n 64 hostname` wall (ms)", f"floor {f(fl)} / libi {f(us)} / hydra {f(hy)}",
             f"libi {ratio(us, fl)} floor, hydra {ratio(hy, fl)} floor", "libi <= 1.2x floor",
             "yes" if us and fl and us <= 1.2 * fl else "no", min(nf, nu, nh)))
us, nu = med("true1", "libi"); hy, nh = med("true1", "hydra")
rows.append(("`-n 1 true` wall (ms)", f"libi {f(us)} / hydra {f(hy)}", f"{ratio(us, hy)} hydra",
             "libi <= hydra", "yes" if us and hy and us <= hy else "no", min(nu, nh)))
us, nu = med("hello64cpu", "libi", "pm_cpu_ms"); hy, nh = med("hello64cpu", "hydra", "pm_cpu_ms")
rows.append(("process manager CPU, MPICH hello n=64 (ms, user+sys): job minus ranks' own report", f"libi {f(us)} / hydra {f(hy)}",
             f"{ratio(us, hy)} hydra", "libi <= 0.5x hydra", "yes" if us is not None and hy and us <= 0.5 * hy else "no", min(nu, nh)))
us, nu = med("hello64cpu", "libi", "pm_own_cpu_ms"); hy, nh = med("hello64cpu", "hydra", "pm_own_cpu_ms")
def paired(var, key):
    """The ratio libi/hydra of each run (the two ran back to back): quartiles."""
    by = {}
    for r in recs:
        if r["variant"] == var and (r["extra"] or {}).get(key) is not None:
            by.setdefault(r["run"], {})[r["contender"]] = r["extra"][key]
    q = sorted(v["libi"] / v["hydra"] for v in by.values() if "libi" in v and v.get("hydra"))
    if len(q) < 4:
        return ""
    qs = statistics.quantiles(q, n=4)
    return f"; run by run {qs[0]:.2f}-{qs[2]:.2f} (quartiles of {len(q)})"
fo, nfo = med("hello64cpu", "floor", "pm_own_cpu_ms")
if nu and nh:
    floor_txt = f"floor {f(fo)} / " if nfo else ""
    floor_ratio = f"; libi {ratio(us, fo)} floor, 0.5x hydra is {ratio(0.5 * hy, fo)} floor" if nfo else ""
    rows.append(("process manager CPU, MPICH hello n=64 (ms, user+sys): its own processes", f"{floor_txt}libi {f(us)} / hydra {f(hy)}",
                 f"{ratio(us, hy)} hydra{paired('hello64cpu', 'pm_own_cpu_ms')}{floor_ratio}", "libi <= 0.5x hydra", "yes" if us is not None and hy and us <= 0.5 * hy else "no", min(nu, nh)))
hx, nx = med("harness64cpu", "harness", "harness_cpu_ms")
if nu and nh and nx:
    rows.append((f"process manager CPU, MPICH hello n=64 (ms, user+sys): its own processes, less the harness (into_cgroup in each rank up to its move: {f(hx)} ms per 64 ranks, measured)",
                 (f"floor {f(fo - hx)} / " if nfo else "") + f"libi {f(us - hx)} / hydra {f(hy - hx)}",
                 f"{ratio(us - hx, hy - hx)} hydra" + (f"; libi {ratio(us - hx, fo - hx)} floor" if nfo else ""), "libi <= 0.5x hydra",
                 "yes" if hy - hx > 0 and us - hx <= 0.5 * (hy - hx) else "no", min(nu, nh, nx)))
fl, nf = med("true64cpu", "floor", "pm_own_cpu_ms"); us, nu = med("true64cpu", "libi", "pm_own_cpu_ms"); hy, nh = med("true64cpu", "hydra", "pm_own_cpu_ms")
if nf and nu and nh:
    rows.append(("for scale: CPU of creating and reaping 64 ranks of `/bin/true` (ms, own processes)", f"floor {f(fl)} / libi {f(us)} / hydra {f(hy)}",
                 f"libi {ratio(us, hy)} hydra, floor {ratio(fl, hy)} hydra", "(the floor bounds what 0.5x can mean)", "-", min(nf, nu, nh)))
f1, nf1 = med("true1cpu", "floor", "pm_own_cpu_ms"); u1, nu1 = med("true1cpu", "libi", "pm_own_cpu_ms"); h1, nh1 = med("true1cpu", "hydra", "pm_own_cpu_ms")
if nf1 and nu1 and nh1 and nf and nu and nh:
    per = lambda a, b: (a - b) / 63 * 1e3
    rows.append(("for scale: the same with 1 rank, what a job costs whatever its size (ms, own processes); per rank added from 1 to 64: floor, libi, hydra",
                 f"floor {f(f1)} / libi {f(u1)} / hydra {f(h1)} ({per(fl, f1):.0f} / {per(us, u1):.0f} / {per(hy, h1):.0f} us)",
                 f"libi {ratio(u1, h1)} hydra, {ratio(u1, f1)} floor", "-", "-", min(nf1, nu1, nh1)))
fk, nfk = med("true1000cpu", "floor", "pm_own_cpu_ms"); uk, nuk = med("true1000cpu", "libi", "pm_own_cpu_ms"); hk, nhk = med("true1000cpu", "hydra", "pm_own_cpu_ms")
if nfk and nuk and nhk:
    rows.append(("for scale: the same with 1000 ranks on the node (ms, own processes; per rank: floor, libi, hydra)",
                 f"floor {f(fk)} / libi {f(uk)} / hydra {f(hk)} ({fk / 1000 * 1e3:.0f} / {uk / 1000 * 1e3:.0f} / {hk / 1000 * 1e3:.0f} us)",
                 f"libi {ratio(uk, hk)} hydra, {ratio(uk, fk)} floor", "-", "-", min(nfk, nuk, nhk)))
fl, nf = med("prestart64", "floor", "prestart_ms"); us, nu = med("prestart64", "libi", "prestart_ms"); hy, nh = med("prestart64", "hydra", "prestart_ms")
if nf and nu and nh:
    rows.append(("for scale: CPU 64 ranks have used when their main() starts (sum of each one's getrusage; the child's work from fork or clone to exec, then the exec of a static program), which the job-minus-report row counts as the ranks' (ms)",
                 f"floor {f(fl)} / libi {f(us)} / hydra {f(hy)}", f"libi {ratio(us, hy)} hydra, floor {ratio(fl, hy)} hydra",
                 "-", "-", min(nf, nu, nh)))
pf, npf = med("pmifloor64", "floor", "server_cpu_ms")
hu, _ = med("hello64cpu", "libi", "pm_own_cpu_ms"); hh, _ = med("hello64cpu", "hydra", "pm_own_cpu_ms")
tu, _ = med("true64cpu", "libi", "pm_own_cpu_ms"); th, _ = med("true64cpu", "hydra", "pm_own_cpu_ms")
if npf and None not in (hu, hh, tu, th):
    rows.append(("for scale: CPU beyond creating and reaping the ranks (hello n=64 own minus `/bin/true` own), against answering 64 x 15 lock-step PMI-1 requests in C (ms)",
                 f"floor {f(pf)} / libi {f(hu - tu)} / hydra {f(hh - th)}", f"libi {ratio(hu - tu, hh - th)} hydra, floor {ratio(pf, hh - th)} hydra",
                 "(with the row above: the floor of the whole target)", "-", npf))
us, nu = med("rss64", "libi", "rss_kb"); hy, nh = med("rss64", "hydra", "rss_kb")
rows.append(("agent peak RSS serving 64 ranks (kB)", f"NLA {f(us)} / hydra proxy {f(hy)}",
             f"{ratio(us, hy)} hydra", "NLA <= hydra proxy", "yes" if us and hy and us <= hy else "no", min(nu, nh)))
u2, nu2 = med("rss256", "libi", "rss_kb"); h2, nh2 = med("rss256", "hydra", "rss_kb")
if nu2 and nh2:
    per = lambda a, b: "n/a" if a is None or b is None else f"{(a - b) / 192:.2f}"
    rows.append(("for scale: agent peak RSS serving 256 ranks (kB)", f"NLA {f(u2)} / hydra proxy {f(h2)}",
                 f"{ratio(u2, h2)} hydra; per rank added: NLA {per(u2, us)} kB, proxy {per(h2, hy)} kB", "-", "-", min(nu2, nh2)))
jc, _ = med("hello64cpu", "libi", "job_cpu_ms"); jh, _ = med("hello64cpu", "hydra", "job_cpu_ms")
how = next((r["extra"].get("how") for r in recs if r["variant"] == "hello64cpu" and r["extra"]), "?")
print("| measure | medians | ratio | target | met | runs each |")
print("|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(x) for x in r) + " |")
print()
print(f"Medians of alternating runs (contender order rotated run by run); load average "
      f"{load_start} at the start, {load_end} at the end. Process manager CPU = the job's CPU "
      f"({how}; median job total libi {f(jc)} ms, hydra {f(jh)} ms) minus what the 64 ranks "
      f"report for themselves (getrusage after MPI_Finalize, `hello.c -DSELF_CPU`; this counts the "
      f"ranks' exit after the report as the process manager's, and the creation of each rank "
      f"(fork or clone, the child's work before exec) as the rank's, since its rusage covers it: the "
      f"row on what ranks have used when main() starts shows how much that is for each). "
      f"Its own processes: each rank is started through `bench/into_cgroup.c`, which moves it into "
      f"a second cgroup and execs the program; what is left in the job's cgroup is the front "
      f"end and agents (mpiexec and proxies) with the creation of every rank up to its move; the "
      f"floor there is `bench/pmfloor.c` running the same job: one C process with one epoll loop that spawns the "
      f"64 ranks (socketpair and two pipes each), copies their output and answers MPICH's PMI-1 requests "
      f"from fixed text and a flat table (no agent, no tree, no checks): what any process manager must "
      f"spend on this machine. The harness: into_cgroup's own exec, "
      f"write and move in each rank's process are charged to the job's cgroup, for either process "
      f"manager alike; measured by starting it twice in a row under `spawnfloor 64` and reading "
      f"the cgroup between the two, and subtracted from both in its row (into_cgroup is built without the "
      f"C library where it can be, x86-64, to keep that error small: 2 ms per 64 ranks against 4-9 ms on "
      f"static glibc). `bench/pmifloor.c` is the least a "
      f"server spends answering lock-step requests (forked clients, no parsing, no key-value space). RSS: "
      f"VmHWM of the agent, sampled every 20 ms, `-n 64 sleep 1` (and `-n 256 sleep 1`, at most 5 runs each).")
PYEOF
}

# ---------------------------------------------------------------- inner entry: one case

if [ "${1:-}" = __case ]; then
  : "${WORK:?}" "${PY:?}"
  "case_${2//-/_}"
  exit 0
fi

# ---------------------------------------------------------------- main

ALL_CASES=(launch hello pmi ssh mem targets)
# Cases only run when named (not part of the default run).
OPT_CASES=(launch-model)
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=("${ALL_CASES[@]}")
# The commit measured, and whether the tree differed from it: taken before this run writes
# its own results into the tree.
GIT_DESC="$(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet 2>/dev/null || echo ', dirty')"
for c in "${CASES[@]}"; do
  [[ " ${ALL_CASES[*]} ${OPT_CASES[*]} " == *" $c "* ]] || { echo "usage: ci/bench.sh [${ALL_CASES[*]} ${OPT_CASES[*]}]" >&2; exit 2; }
done
# Cases that write a section of results.md of their own (between markers) and leave the
# rest of it, and raw.json, alone when they are all that runs.
SECTION_CASES=" targets launch-model "
only_sections=1
for c in "${CASES[@]}"; do [[ "$SECTION_CASES" == *" $c "* ]] || only_sections=0; done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_RUNS must be a positive integer" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || log "warning: not root: apt installs and the ssh case (namespaces) will fail"

OUT=${BENCH_OUT:-$ROOT/bench}
case "$OUT" in /*) ;; *) OUT=$ROOT/$OUT ;; esac
mkdir -p "$OUT"
export WORK
WORK=$(mktemp -d /tmp/libi-bench.XXXXXX)
: >"$WORK/raw.jsonl"
: >"$WORK/cases.jsonl"
START=$SECONDS

# packages
pkgs=(mpich libmpich-dev procps time iproute2 openssh-server openssh-client python3-venv)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$WORK/apt.log" 2>&1 \
    || { log "apt-get failed (see $WORK/apt.log)"; }
fi

# build
log "cargo build --release --workspace --bins (target $TGT)"
cargo build --release --workspace --bins -q
mpicc -DPROG='"hello"' -O2 -o "$WORK/hello" tests/programs/hello.c
cc -O2 -o "$WORK/pmi_exchange" tests/programs/pmi_exchange.c
cc -O2 -o "$WORK/spawnfloor" bench/spawnfloor.c
cc -O2 -o "$WORK/pmifloor" bench/pmifloor.c
cc -O2 -o "$WORK/pmfloor" bench/pmfloor.c
cc -O2 -static -o "$WORK/prestart" bench/prestart.c 2>/dev/null || cc -O2 -o "$WORK/prestart" bench/prestart.c
mpicc -DPROG='"hello"' -DSELF_CPU -O2 -o "$WORK/hello_cpu" tests/programs/hello.c
build_into_cgroup

# python with matplotlib (plots are skipped, not fatal, when this fails)
VENV=$TGT/bench-venv
export PY=$VENV/bin/python3
if [ "${CASES[*]}" != targets ] && ! "$PY" -c 'import matplotlib' 2>/dev/null; then
  log "pip install matplotlib into $VENV"
  { [ -x "$PY" ] || python3 -m venv "$VENV" || /usr/bin/python3 -m venv "$VENV"; } >"$WORK/venv.log" 2>&1 || true
  "$VENV/bin/pip" install -q matplotlib >>"$WORK/venv.log" 2>&1 || log "pip install matplotlib failed: no plots (see $WORK/venv.log)"
fi
[ -x "$PY" ] || PY=$(command -v python3)

# limits: thousands of ranks need file descriptors
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# machine description
{
  echo "{"
  echo "\"date\": $(jstr "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"),"
  echo "\"host\": $(jstr "$(hostname)"),"
  echo "\"nproc\": $(nproc),"
  echo "\"kernel\": $(jstr "$(uname -srm)"),"
  echo "\"cpu\": $(jstr "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"),"
  echo "\"mem\": $(jstr "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"),"
  echo "\"os\": $(jstr "$(. /etc/os-release && echo "$PRETTY_NAME")"),"
  echo "\"libi\": $(jstr "$("$LIBI" --version 2>&1 | head -n1) (git $GIT_DESC)"),"
  echo "\"hydra\": $(jstr "$(mpiexec.hydra --version 2>&1 | awk -F': *' '/Version:/ {print "HYDRA " $2; exit}')"),"
  echo "\"mpich\": $(jstr "$(dpkg-query -W -f='${Version}' mpich 2>/dev/null)"),"
  echo "\"slurm\": $(jstr "$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || echo none)"),"
  echo "\"rustc\": $(jstr "$(rustc --version 2>&1)"),"
  echo "\"ulimit_n\": $(jstr "$(ulimit -n)"),"
  echo "\"ulimit_u\": $(jstr "$(ulimit -u)"),"
  echo "\"pid_max\": $(cat /proc/sys/kernel/pid_max),"
  echo "\"runs\": $RUNS,"
  echo "\"quick\": $([ "$QUICK" = 1 ] && echo true || echo false),"
  echo "\"load_start\": $(jstr "$(cut -d' ' -f1-3 /proc/loadavg)"),"
} >"$WORK/meta.part"

for c in "${CASES[@]}"; do
  log "== case $c"
  t0=$SECONDS
  if bash "$SELF" __case "$c" 2> >(tee "$WORK/case-$c.log" >&2); then rc=0; else rc=$?; fi
  # nothing of ours may survive a case
  printf '{"case":%s,"rc":%s,"seconds":%s,"log_tail":%s}\n' "$(jstr "$c")" "$rc" $((SECONDS - t0)) \
    "$(jstr "$( [ "$rc" -eq 0 ] || tail -n 3 "$WORK/case-$c.log")")" >>"$WORK/cases.jsonl"
  [ "$rc" -eq 0 ] || log "case $c FAILED (exit $rc); continuing"
done

{
  cat "$WORK/meta.part"
  echo "\"load_end\": $(jstr "$(cut -d' ' -f1-3 /proc/loadavg)"),"
  echo "\"seconds\": $((SECONDS - START))"
  echo "}"
} >"$WORK/meta.json"

if [ -f "$WORK/launch-greedy.svg" ]; then cp "$WORK/launch-greedy.svg" "$OUT/ssh-greedy-launch.svg"; fi
if [ -f "$WORK/ssh-greedy.report.json" ]; then cp "$WORK/ssh-greedy.report.json" "$OUT/ssh-greedy-report.json"; fi
# Only section cases (targets, launch-model): the rest of results.md (and raw.json) stays as it was.
if [ "$only_sections" = 0 ]; then
  "$PY" "$ROOT/ci/bench_plot.py" render --work "$WORK" --out "$OUT"
fi
if grep -q '"case":"targets"' "$WORK/raw.jsonl"; then
  grep '"case":"targets"' "$WORK/raw.jsonl" >"$OUT/targets-raw.jsonl"
  {
    echo "<!-- targets:begin (written by ci/bench.sh targets) -->"
    echo "## Targets of issue 20 (launch cost near the floor)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, git $GIT_DESC; raw runs: \`bench/targets-raw.jsonl\`."
    echo
    targets_table "$(jq -r .load_start "$WORK/meta.json" 2>/dev/null || grep -o '"load_start": "[^"]*"' "$WORK/meta.json" | cut -d'"' -f4)" "$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "<!-- targets:end -->"
  } >"$WORK/targets.md"
  cat "$WORK/targets.md" >&2
  touch "$OUT/results.md"
  "$PY" - "$OUT/results.md" "$WORK/targets.md" <<'PYEOF'
import re, sys
doc, new = open(sys.argv[1]).read(), open(sys.argv[2]).read().rstrip("\n") + "\n"
pat = re.compile(r"<!-- targets:begin.*?<!-- targets:end -->\n?", re.S)
doc = pat.sub(lambda _m: new, doc, count=1) if pat.search(doc) else doc.rstrip("\n") + "\n\n" + new
open(sys.argv[1], "w").write(doc)
PYEOF
fi
if grep -q '"case":"launch-model"' "$WORK/raw.jsonl"; then
  mkdir -p "$OUT/data"
  touch "$OUT/results.md"
  "$PY" "$ROOT/ci/bench_plot.py" lm-render --work "$WORK" --out "$OUT" \
    --git "$GIT_DESC" >&2 \
    || log "launch-model: lm-render failed"
fi
log "done in $((SECONDS - START)) s: $OUT/results.md (work dir $WORK)"
