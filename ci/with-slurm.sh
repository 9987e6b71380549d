#!/usr/bin/env bash
# Run a command with the single-node Slurm of ci/slurm.sh up, and tear it down afterwards
# whatever happens (normal exit, failure, SIGINT, SIGTERM, SIGHUP). Root only.
#
#   ci/with-slurm.sh -- CMD [ARGS...]
#
# CMD runs with LIBI_TEST_SLURM=1 and SLURM_CONF set (so srun/salloc/sinfo find the cluster).
# The exit status is CMD's (128+signal if it was killed by a signal); 2 if Slurm could not be
# brought up. Setup/teardown messages go to stderr. One run at a time: a second one waits.
set -Eeuo pipefail

PROG=with-slurm.sh
here=$(cd "$(dirname "$0")" && pwd)
SL=$here/slurm.sh

die() { echo "$PROG: error: $*" >&2; exit 2; }

[ "${1:-}" = "--" ] && [ $# -ge 2 ] || die "usage: $PROG -- CMD [ARGS...]"
shift
[ "$(id -u)" -eq 0 ] || die "must run as root"

# One session at a time (slurm.sh's own lock only covers one up/down; this covers the run).
mkdir -p /run/lock
exec 8>/run/lock/libi-ci-slurm-session.lock
if ! flock -n 8; then
  echo "$PROG: another run holds the Slurm cluster; waiting..." >&2
  flock -w 3600 8 || die "timed out waiting for /run/lock/libi-ci-slurm-session.lock"
fi

child=
teardown() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  bash "$SL" down 8>&- >&2 || echo "$PROG: warning: teardown failed" >&2
  exit "$rc"
}
on_signal() { # forward to CMD; the main line then collects its status
  if [ -n "$child" ]; then
    kill -"$1" "$child" 2>/dev/null || true
  else
    exit $((128 + $2))
  fi
}
trap teardown EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# The daemons must not inherit the session lock (fd 8), or it would outlive us.
bash "$SL" up 8>&- >&2 || die "could not bring Slurm up (see above)"
eval "$(bash "$SL" env 8>&-)"
export SLURM_CONF LIBI_TEST_SLURM=1

"$@" 8>&- &
child=$!
rc=0
while :; do
  wait "$child" && rc=0 || rc=$?
  # wait returns >128 when a trapped signal interrupted it; loop until CMD really ended.
  kill -0 "$child" 2>/dev/null || break
done
# If a signal interrupted the last wait just as CMD ended, CMD is not reaped yet: collect it.
wait "$child" 2>/dev/null && rc=0 || { r=$?; [ "$r" -eq 127 ] || rc=$r; }
child=
exit "$rc"
