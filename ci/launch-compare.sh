#!/usr/bin/env bash
# Launch over real ssh into N namespace hosts (default 8): each tree shape run RUNS times
# (alternating), median launch time (front end start -> every NLA up, from --report), then
# SEQ/REM fitted from one greedy report and every shape's modeled time with those constants.
# Needs root (namespaces). Not part of the test suite.
#   ci/launch-compare.sh [N] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-8}
RUNS=${2:-5}
if [ -z "${LIBI_TEST_HOSTS:-}" ]; then
  exec bash ci/with-netns-hosts.sh "$N" -- bash "$0" "$N" "$RUNS"
fi
cargo build --release --workspace --bins -q
M=$PWD/target/release/libi-mpiexec
T=$PWD/target/release/libi-tree
out=$(mktemp -d)
shapes=(greedy kary:2 kary:4 flat chain)
for i in $(seq 1 "$RUNS"); do
  for s in "${shapes[@]}"; do
    "$M" -launcher ssh -launcher-exec "$LIBI_TEST_SSH" -hosts "$LIBI_TEST_HOSTS" --tree "$s" \
      --report "$out/$s.$i.json" -n "$N" true
  done
done
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo "== calibration from greedy run 1 (SEQ/REM least squares)"
"$T" calibrate --cores off --hold no "$out/greedy.1.json"
fit=$("$T" calibrate --cores off --hold no "$out/greedy.1.json" --format json)
seq=$(python3 -c "import json,sys; f=json.loads(sys.argv[1]); print(f['seq'] if f['seq'] is not None else 0.007)" "$fit")
rem=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['rem'])" "$fit")
echo
echo "== $N hosts over ssh, median of $RUNS runs; modeled with the fitted SEQ=$seq REM=$rem"
echo
echo "| shape   | measured launch (s) | modeled (s) |"
echo "|---------|---------------------|-------------|"
plan=$("$T" plan --nodes $((N + 1)) --seq "$seq" --rem "$rem" --format json)
for s in "${shapes[@]}"; do
  m=$(for i in $(seq 1 "$RUNS"); do python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['launch_time'])" "$out/$s.$i.json"; done | median)
  model=$(python3 -c "import json,sys; p=json.loads(sys.argv[1]); print([x['time'] for x in p['shapes'] if x['shape']==sys.argv[2]][0])" "$plan" "$s")
  printf "| %-7s | %19.3f | %11.3f |\n" "$s" "$m" "$model"
done
"$T" plot "$out/greedy.1.json" -o "${PLOT:-$out/launch.svg}" >/dev/null && echo && echo "plot: ${PLOT:-$out/launch.svg}"
echo "reports in $out"
