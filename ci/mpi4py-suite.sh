#!/usr/bin/env bash
# mpi4py's own test suite (test/ of the mpi4py sdist, run by its runtests.py) with N ranks
# under Open MPI's mpirun (PRRTE) and under libi-mpiexec -pmi pmix, same binaries, module by
# module: mpi4py built against the Open MPI 5 wheel in /opt/libi/openmpi5, its test suite
# unpacked into /opt/libi/openmpi5/mpi4py-tests (both from ci/install-deps.sh).
#
#   ci/mpi4py-suite.sh [-n N] [-t SECONDS] [MODULE...]
#
# -n: ranks per job (default 2). -t: time limit of each module's job (default 120 s).
# MODULE: test modules to run, e.g. test_comm test_rma (default: every test/test_*.py).
# Both launchers get the same environment: the transports pinned (OMPI_MCA_pml=ob1, btl
# self,sm,tcp on lo; the wheel's UCX and OFI otherwise probe for a second or more in every
# MPI_Init), OPAL_PREFIX and PRTE_PREFIX; mpirun runs with --oversubscribe --bind-to none
# (and --allow-run-as-root as root). Each rank's output goes to a file of its own,
# target/mpi4py-suite/LAUNCHER/MODULE/rank.R; the launcher's own, and that of the ranks that
# test_spawn starts, to launcher.log beside them.
# Prints a table, one row per module and launcher: ok (every rank passed; rank 0's tests run
# and skipped), FAIL (failures F and errors E summed over the ranks), TIMEOUT, or EXIT with
# the job's status when a rank left no result (no PMIX_RANK, a banner of another rank: an
# Open MPI singleton that reached no PMIx server, or no unittest summary), and the seconds
# each job took; a summary line last. A whole run (-n 2) takes 1.5 to 4 minutes. Exits 1 if a
# module passes under mpirun and not under libi, unless KNOWN below explains it (then only
# the tests it names may fail). LIBI_MPIEXEC names another libi-mpiexec (default
# target/debug/libi-mpiexec; libi-nla and libi-pmix beside it); LIBI_OPENMPI5 another Open
# MPI prefix (with mpi4py and mpi4py-tests/).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
ROOT=$PWD

# Modules known to pass under mpirun and not under libi, each with the reason, looked at (see
# the module's launcher.log and rank files), not guessed, and in KNOWN_TESTS the tests
# (module.Class.test, an extended regex) whose failure it explains: a failure of any other
# test, or a crash or timeout, is still a difference. Take a module out once it passes: the
# summary names those listed that did not differ.
declare -A KNOWN=(
  # MPI_Comm_create_from_group, MPI_Intercomm_create_from_groups: PMIx_Group_construct.
  # libi-pmix links Debian 12's OpenPMIx 4.2.2, whose server answers it as PMIx before 4.2.4
  # did (status, then the context id); the wheel's 5.0.11 client reads the context id as the
  # member count of the newer answer (status, members, context id) and fails ("PMIX ERROR:
  # PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER ... pmix_client_group.c at line 1125"): the
  # call returns MPI_ERR_UNKNOWN. mpirun's PRRTE serves it with PMIx 5.0.11.
  [test_comm]="Create_from_group: PMIx_Group_construct's answer from OpenPMIx 4.2.2 (libi-pmix) unreadable to the 5.0.11 client"
  [test_comm_inter]="Create_from_groups: PMIx_Group_construct's answer from OpenPMIx 4.2.2 (libi-pmix) unreadable to the 5.0.11 client"
)
declare -A KNOWN_TESTS=(
  [test_comm]='\.testCreateFromGroup$'
  [test_comm_inter]='\.testCreateFromGroups$|^test_comm_inter\.TestIntercommCreateFromGroups\.'
)

NP=2 LIMIT=120
while getopts "n:t:h" o; do
  case $o in
    n) NP=$OPTARG ;;
    t) LIMIT=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || { echo "ci/mpi4py-suite.sh: -n needs a number of ranks, not '$NP'" >&2; exit 2; }
[[ "$LIMIT" =~ ^[1-9][0-9]*$ ]] || { echo "ci/mpi4py-suite.sh: -t needs seconds, not '$LIMIT'" >&2; exit 2; }

OMPI=${LIBI_OPENMPI5:-/opt/libi/openmpi5}
TESTS=$OMPI/mpi4py-tests
PY=$OMPI/bin/python
LIBI=${LIBI_MPIEXEC:-$ROOT/target/debug/libi-mpiexec}
[ -x "$LIBI" ] || { echo "ci/mpi4py-suite.sh: $LIBI not built (cargo build --workspace)" >&2; exit 2; }
[ -f "$TESTS/runtests.py" ] && "$PY" -c 'import mpi4py' 2>/dev/null ||
  { echo "ci/mpi4py-suite.sh: no mpi4py or its tests in $OMPI (run ci/install-deps.sh)" >&2; exit 2; }

modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  for f in "$TESTS"/test_*.py; do modules+=("$(basename "$f" .py)"); done
fi
for m in "${modules[@]}"; do
  [ -f "$TESTS/$m.py" ] || { echo "ci/mpi4py-suite.sh: no module $m in $TESTS" >&2; exit 2; }
done

export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm,tcp OMPI_MCA_btl_tcp_if_include=lo
export OPAL_PREFIX=$OMPI PRTE_PREFIX=$OMPI
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
MPIRUN=("$OMPI/bin/mpirun" "${root[@]}" --oversubscribe --bind-to none -n "$NP")
LIBIRUN=("$LIBI" -pmi pmix -n "$NP")

WORK=$ROOT/target/mpi4py-suite
rm -rf "$WORK"
mkdir -p "$WORK"

# Each rank: its pid (for the clean-up after a timeout) and its output to a file of its own
# (rank.none.PID without PMIX_RANK), then runtests.py (the same process, through exec).
# shellcheck disable=SC2016 # expanded by each rank's shell
RANK_SH='r=${PMIX_RANK:-none.$$}; echo $$ >"$0/pid.$r"; exec "$@" >"$0/rank.$r" 2>&1 </dev/null'

# run WHO MODULE: the module's job under launcher WHO (mpirun or libi); sets RES (the table's
# cell), SECS and FAILED_TESTS (for a FAIL).
run() {
  local who=$1 m=$2 d=$WORK/$1/$2 rc=0 t0 t1 r f line ok=1 run0="" skip0="" fails=0 errs=0
  local -a cmd
  if [ "$who" = mpirun ]; then cmd=("${MPIRUN[@]}"); else cmd=("${LIBIRUN[@]}"); fi
  mkdir -p "$d"
  t0=$(date +%s.%N)
  (cd "$d" && timeout -k 10 "$LIMIT" "${cmd[@]}" sh -c "$RANK_SH" "$d" \
     "$PY" "$TESTS/runtests.py" --no-builddir "$m" >launcher.log 2>&1 </dev/null) || rc=$?
  t1=$(date +%s.%N)
  SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  # Ranks that outlived their launcher (a timeout): ours by pid, still running runtests.py.
  for f in "$d"/pid.*; do
    [ -f "$f" ] || continue
    read -r r <"$f" || continue
    if grep -qs runtests.py "/proc/$r/cmdline"; then
      kill -KILL "$r" 2>/dev/null && echo "ci/mpi4py-suite.sh: $who $m: killed rank pid $r left running" >>"$d/launcher.log"
    fi
  done
  FAILED_TESTS=""
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then RES=TIMEOUT; return; fi
  if compgen -G "$d/rank.none.*" >/dev/null; then RES="EXIT $rc (no PMIX_RANK)"; return; fi
  for ((r = 0; r < NP; r++)); do
    f=$d/rank.$r
    # The banner says [RANK@host]: an Open MPI singleton says 0 whatever its PMIX_RANK.
    if ! grep -q "^\[$r@" "$f" 2>/dev/null; then
      if grep -q '^\[[0-9]*@' "$f" 2>/dev/null; then RES="EXIT $rc (r$r: singleton)"; else RES="EXIT $rc (r$r: no output)"; fi
      return
    fi
    line=$(grep -E '^(OK|FAILED)( \(|$)' "$f" | tail -1 || true)
    if [ -z "$line" ] || ! grep -q '^Ran [0-9]* tests\? in' "$f"; then RES="EXIT $rc (r$r: no result)"; return; fi
    [[ "$line" == OK* ]] || ok=0
    fails=$((fails + $(sed -n 's/.*failures=\([0-9]*\).*/\1/p' <<<"$line" | grep . || echo 0)))
    errs=$((errs + $(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$line" | grep . || echo 0)))
    if [ "$r" -eq 0 ]; then
      run0=$(grep '^Ran [0-9]* tests\? in' "$f" | tail -1 | awk '{ print $2 }' || true)
      skip0=$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' <<<"$line" | grep . || echo 0)
    fi
  done
  # The failing tests of every rank, as module.Class.test.
  FAILED_TESTS=$(sed -n 's/^\(ERROR\|FAIL\): [^ ]* (\([^)]*\))$/\2/p' "$d"/rank.* | sort -u)
  if [ "$ok" = 1 ] && [ "$rc" -eq 0 ]; then
    RES="ok $run0 ($skip0 skipped)"
  elif [ "$ok" = 1 ]; then
    RES="EXIT $rc (all ranks OK)"
  else
    RES="FAIL $run0 (${fails}F ${errs}E)"
  fi
}

printf '%-21s %-24s %6s  %-24s %6s\n' module "mpirun -n $NP" s "libi -n $NP" s
n_ok_m=0 n_ok_l=0 differ=() known_hit=() known_fixed=()
for m in "${modules[@]}"; do
  run mpirun "$m"; rm_=$RES sm=$SECS
  run libi "$m"; rl=$RES sl=$SECS
  note=""
  [[ "$rm_" == ok* ]] && n_ok_m=$((n_ok_m + 1))
  [[ "$rl" == ok* ]] && n_ok_l=$((n_ok_l + 1))
  if [[ "$rm_" == ok* && "$rl" != ok* ]]; then
    other=""
    if [[ "$rl" == FAIL* ]]; then other=$(grep -Ev "${KNOWN_TESTS[$m]:-^}" <<<"$FAILED_TESTS" | paste -sd' ' || true); fi
    if [ -n "${KNOWN[$m]:-}" ] && [[ "$rl" == FAIL* ]] && [ -z "$other" ]; then
      known_hit+=("$m"); note="known: ${KNOWN[$m]}"
    else
      differ+=("$m"); note="DIFFERS (see target/mpi4py-suite/libi/$m)"
      [ -z "${KNOWN[$m]:-}" ] || note+="; beyond the known: ${other:-$rl}"
    fi
  elif [ -n "${KNOWN[$m]:-}" ] && [[ "$rl" == ok* ]]; then
    known_fixed+=("$m")
    note="listed as known, but passes now"
  fi
  printf '%-21s %-24s %6s  %-24s %6s  %s\n' "$m" "$rm_" "$sm" "$rl" "$sl" "$note"
done
echo "mpi4py-suite: ${#modules[@]} modules, $NP ranks: ok under mpirun $n_ok_m, under libi $n_ok_l;" \
  "passing under mpirun only: ${#differ[@]} unexplained${differ[*]:+ (${differ[*]})}, ${#known_hit[@]} known${known_hit[*]:+ (${known_hit[*]})}"
[ ${#known_fixed[@]} -eq 0 ] || echo "mpi4py-suite: in KNOWN but passing under libi in this run: ${known_fixed[*]}"
[ ${#differ[@]} -eq 0 ]
