#!/usr/bin/env bash
# Run a command with N netns test hosts up (see ci/netns-hosts.sh), and tear them down again
# afterwards, whatever happens (normal exit, failure, SIGINT, SIGTERM, SIGHUP).
#
#   ci/with-netns-hosts.sh N -- CMD [ARGS...]
#
# CMD runs with:
#   LIBI_TEST_HOSTS     comma-separated host addresses, 10.201.0.1,...,10.201.0.N
#   LIBI_TEST_SSH       ssh wrapper to use as launcher (-launcher ssh -launcher-exec $LIBI_TEST_SSH)
#   LIBI_TEST_FE_ADDR   the front end's address on the hosts' network, 10.201.0.254
# The exit status is CMD's (128+signal if it was killed by a signal). Setup/teardown messages
# go to stderr. Only one run at a time: a second one waits for the first (the names are global).
set -Eeuo pipefail

PROG=with-netns-hosts.sh
here=$(cd "$(dirname "$0")" && pwd)
NH=$here/netns-hosts.sh

die() { echo "$PROG: error: $*" >&2; exit 2; }

n=${1:-}
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "${2:-}" = "--" ] && [ $# -ge 3 ] \
  || die "usage: $PROG N -- CMD [ARGS...]"
shift 2
[ "$(id -u)" -eq 0 ] || die "must run as root"

# One session at a time (separate lock from netns-hosts.sh's own up/down lock).
mkdir -p /run/lock
exec 8>/run/lock/libi-netns-session.lock
if ! flock -n 8; then
  echo "$PROG: another run holds the netns hosts; waiting..." >&2
  flock -w 3600 8 || die "timed out waiting for /run/lock/libi-netns-session.lock"
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
  bash "$NH" down >&2 || echo "$PROG: warning: teardown failed" >&2
  exit "$rc"
}
on_signal() {  # forward to CMD; the main loop then collects its status
  if [ -n "$child" ]; then
    kill -"$1" "$child" 2>/dev/null || true
  else
    exit $((128 + $2))   # still setting up: EXIT trap tears down
  fi
}
trap teardown EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

ssh_wrapper=$(bash "$NH" up "$n")
hosts=$(bash "$NH" hosts)

export LIBI_TEST_HOSTS=$hosts LIBI_TEST_SSH=$ssh_wrapper LIBI_TEST_FE_ADDR=10.201.0.254
echo "$PROG: LIBI_TEST_HOSTS=$LIBI_TEST_HOSTS LIBI_TEST_SSH=$LIBI_TEST_SSH" >&2

# Run CMD in the background so that signals reach us while it runs (a foreground child would
# delay our traps until it exits). Background jobs of a non-interactive shell start with
# SIGINT/SIGQUIT ignored; env --default-signal gives CMD normal Ctrl-C behaviour back.
env --default-signal=INT,QUIT "$@" &
child=$!
set +e
while :; do
  wait "$child"
  rc=$?
  # wait also returns (status >128) when one of our traps ran; loop until CMD has really ended
  kill -0 "$child" 2>/dev/null || break
done
set -e
child=
exit "$rc"
