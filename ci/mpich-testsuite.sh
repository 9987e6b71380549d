#!/usr/bin/env bash
# MPICH's own test suite (test/mpi of the MPICH source, run by its own `runtests`) under
# libi-mpiexec, and with --hydra under MPICH's mpiexec.hydra in the same run, directory by
# directory. Nothing of MPICH is kept in this repository: the source comes from Debian's
# source package (mpich 4.0.2, fetched by ci/mpich-source.sh, which adds a deb-src entry
# for it if apt has none), its tests are configured against MPICH 5 (/opt/libi/mpich5, from
# ci/install-deps.sh: Debian's MPICH 4.0.2 cannot do dynamic processes) and built under
# target/mpich-testsuite.
#
#   ci/mpich-testsuite.sh [--hydra] [--release] [--ssh-hosts] [DIR...]
#
# --ssh-hosts: run each directory a second time over the netns test hosts, 2 slots each,
# with the ssh launcher (inside ci/with-netns-hosts.sh, which sets LIBI_TEST_HOSTS,
# LIBI_TEST_SSH and LIBI_TEST_FE_ADDR): real hosts, each with its own hostname and address.
#
# DIR: directories of test/mpi (default: spawn init, the ones about the process manager:
# MPI_Comm_spawn, spawn_multiple, connect/accept, name publishing, exit statuses, MPI_Abort).
# Others worth a run: info group errhan mpi_t attr comm topo pt2pt coll rma errors impls.
# A test that fails runs again on its own, up to MPICH_TEST_RETRIES times (default 3; see
# `run`: MPICH 5 hangs in MPI_Init now and then on the ssh hosts, under Hydra as under libi);
# one that passes then is listed as "passed on a retry" and does not fail the run.
# Prints a table (tests, failures under each) and the failing tests' names; exits 1 if a test
# fails under libi (with --hydra: only one that Hydra passes; the 4.0.2 test suite has a few
# tests that MPICH 5 itself fails, e.g. errhan/adderr, which does not compile against it).
# ci/test.sh runs it with the defaults; MPITEST_TIMEOUT (default 120 s) bounds each test;
# LIBI_MPIEXEC names another libi-mpiexec to test.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
hydra=0 profile=debug ssh=0 dirs=()
for a in "$@"; do
  case "$a" in
    --hydra) hydra=1 ;;
    --release) profile=release ;;
    --ssh-hosts) ssh=1 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "ci/mpich-testsuite.sh: unknown option $a" >&2; exit 2 ;;
    *) dirs+=("$a") ;;
  esac
done
[ ${#dirs[@]} -gt 0 ] || dirs=(spawn init)
retries=${MPICH_TEST_RETRIES:-3}
[[ "$retries" =~ ^[0-9]+$ ]] || { echo "ci/mpich-testsuite.sh: MPICH_TEST_RETRIES must be a number, not '$retries'" >&2; exit 2; }
LIBI=${LIBI_MPIEXEC:-$ROOT/target/$profile/libi-mpiexec}
MPICH5=${LIBI_MPICH5:-/opt/libi/mpich5}
HYDRA=$MPICH5/bin/mpiexec.hydra
[ -x "$LIBI" ] || { echo "ci/mpich-testsuite.sh: $LIBI not built (cargo build --workspace${profile/debug/})" >&2; exit 2; }
if [ "$ssh" = 1 ] && [ -z "${LIBI_TEST_HOSTS:-}" -o -z "${LIBI_TEST_SSH:-}" ]; then
  echo "ci/mpich-testsuite.sh: --ssh-hosts needs LIBI_TEST_HOSTS and LIBI_TEST_SSH (run it under ci/with-netns-hosts.sh)" >&2
  exit 2
fi
[ -x "$MPICH5/bin/mpicc" ] || { echo "ci/mpich-testsuite.sh: no MPICH 5 at $MPICH5 (run ci/install-deps.sh)" >&2; exit 2; }

WORK=$ROOT/target/mpich-testsuite
T=$WORK/test/mpi
if [ ! -f "$T/.configured" ]; then
  # Fetched (once) and unpacked afresh by ci/mpich-source.sh, which ci/test.sh also runs
  # for MPICH's PMI headers.
  rm -rf "$WORK/test"
  bash ci/mpich-source.sh 'test/mpi/*'
  echo "ci/mpich-testsuite.sh: configuring it against $MPICH5"
  (cd "$T" && PATH=$MPICH5/bin:$PATH MPICC=$MPICH5/bin/mpicc ./configure --with-mpi="$MPICH5" \
      --disable-fortran --disable-cxx --disable-romio --disable-ft-tests --disable-perftest \
      >"$WORK/configure.log" 2>&1) || { echo "ci/mpich-testsuite.sh: configure failed, see $WORK/configure.log" >&2; exit 2; }
  make -C "$T/util" >"$WORK/make-util.log" 2>&1 && make -C "$T/dtpools" >>"$WORK/make-util.log" 2>&1 ||
    { echo "ci/mpich-testsuite.sh: building the test library failed, see $WORK/make-util.log" >&2; exit 2; }
  touch "$T/.configured"
fi

# runtests DIR TESTLIST TAP LOG MPIEXEC [ARGS]: the tests of TESTLIST in DIR through MPICH's
# runtests (which builds each program as it comes), ARGS before each test's own mpiexec
# arguments; results in TAP (replaced), output appended to LOG.
runtests() {
  rm -f "$3"
  (cd "$T/$1" && MPIR_CVAR_CH4_NETMOD=ofi MPITEST_TIMEOUT=${MPITEST_TIMEOUT:-120} MPITEST_MPIEXECARG="${6:-}" \
     ../runtests -srcdir=. -tests="$2" -mpiexec="$5" -tapfile="$3" >>"$4" 2>&1) || true
}

# run DIR NAME MPIEXEC [ARGS]: the directory's testlist (see runtests); sets FAILED to the
# failing tests, each as NAME:NP (a program may be listed with several process counts), N to
# the number of tests.
run() {
  local d=$1 name=$2 mpiexec=$3 tap=$WORK/$1-$2.tap log=$WORK/$1-$2.log
  : >"$log"
  runtests "$d" testlist "$tap" "$log" "$mpiexec" "${4:-}"
  # grep -c prints 0 (and fails) when nothing matches, nothing when there is no file.
  N=$(grep -cE '^(not )?ok ' "$tap" 2>/dev/null) || true
  N=${N:-0}
  FAILED=$(awk '/^not ok/ {print $4 ":" $5}' "$tap" 2>/dev/null | sed 's|^\./||' | sort | tr '\n' ' ')
  # A failed test runs again on its own, up to $retries times: MPICH 5 now and then hangs in
  # MPI_Init on these hosts, after PMI is done, the ranks spinning in MPICH's progress loop,
  # under mpiexec.hydra 5.0.2 as under libi. Measured (session 33, MPI_Init + MPI_Barrier,
  # 10 ranks on 8 slots over the 4 ssh hosts, 60 runs each): 7-8 hang under libi, 2-10 under
  # Hydra; none with MPIR_CVAR_NOLOCAL=1 (no shared memory), none with 1 rank per host, none
  # with the 10 ranks on this machine alone (80 runs); a private /dev/shm per host changes
  # nothing. spawn_rootargs (10 ranks, each spawning 5) hung in 5 of 30 runs under libi and
  # 2 of 30 under Hydra, so one retry was not enough (it turned a CI run red). RETRIED lists
  # the tests that then passed (NAME:NP/ATTEMPT); a test that fails every time stays in
  # FAILED.
  RETRIED=""
  local still="" t k ok
  for t in $FAILED; do
    awk -v n="${t%%:*}" -v p="${t##*:}" '$1 == n && $2 == p' "$T/$d/testlist" >"$T/$d/testlist.retry"
    ok=0
    for k in $(seq 1 "$retries"); do
      runtests "$d" testlist.retry "$tap.retry" "$log" "$mpiexec" "${4:-}"
      if [ -s "$T/$d/testlist.retry" ] && grep -q '^ok ' "$tap.retry" 2>/dev/null && ! grep -q '^not ok' "$tap.retry"; then
        ok=1
        break
      fi
    done
    if [ "$ok" = 1 ]; then
      RETRIED+="$t/$((k + 1)) "
    else
      still+="$t "
    fi
    rm -f "$T/$d/testlist.retry"
  done
  FAILED=$still
}

status=0
rows=()
# case1 DIR LABEL SUFFIX [LIBI-ARGS [HYDRA-ARGS]]: one row of the table.
case1() {
  local d=$1 label=$2 sfx=$3 only fl fh nl
  run "$d" "libi$sfx" "$LIBI" "${4:-}"; nl=$N; fl=$FAILED; rl=$RETRIED
  if [ -n "${rl// /}" ]; then
    echo "ci/mpich-testsuite.sh: $label: failed, then passed on a retry under libi (NAME:NP/ATTEMPT): $rl" >&2
  fi
  if [ "$hydra" = 1 ]; then
    run "$d" "hydra$sfx" "$HYDRA" "${5:-}"; fh=$FAILED; rh=$RETRIED
    only=$(comm -23 <(tr ' ' '\n' <<<"$fl" | sed '/^$/d' | sort -u) <(tr ' ' '\n' <<<"$fh" | sed '/^$/d' | sort -u) | tr '\n' ' ')
    rows+=("$label|$nl|$(wc -w <<<"$fl")|$(wc -w <<<"$fh")|${fl:--}|${fh:--}|${rl:--}|${rh:--}")
  else
    only=$fl
    rows+=("$label|$nl|$(wc -w <<<"$fl")|-|${fl:--}|-|${rl:--}|-")
  fi
  if [ "$nl" -eq 0 ] || [ -n "${only// /}" ]; then
    status=1
    echo "ci/mpich-testsuite.sh: $label: failed under libi: ${only:-no test ran} (output: $WORK/$d-libi$sfx.log)" >&2
  fi
}
if [ "$ssh" = 1 ]; then
  hostlist=$(tr ',' '\n' <<<"$LIBI_TEST_HOSTS" | sed 's/$/:2/' | paste -sd,)
  ssh_args="-launcher ssh -launcher-exec $LIBI_TEST_SSH -hosts $hostlist"
  nhosts=$(tr ',' '\n' <<<"$LIBI_TEST_HOSTS" | wc -l)
fi
for d in "${dirs[@]}"; do
  [ -f "$T/$d/testlist" ] || { echo "ci/mpich-testsuite.sh: no test directory $d" >&2; exit 2; }
  case1 "$d" "$d" ""
  if [ "$ssh" = 1 ]; then
    # Hydra's proxies reach it at the front end's address on the hosts' network.
    case1 "$d" "$d ($nhosts ssh hosts)" "-ssh" "$ssh_args" "$ssh_args -localhost ${LIBI_TEST_FE_ADDR:-10.201.0.254}"
  fi
done
echo
echo "| test/mpi directory | tests | failed under libi | failed under Hydra | failing under libi | failing under Hydra | passed on a retry under libi | under Hydra |"
echo "|---|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r d n a b fa fb ra rb <<<"$r"
  echo "| $d | $n | $a | $b | $fa | $fb | $ra | $rb |"
done
exit $status
