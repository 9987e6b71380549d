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
# shellcheck source=ci/session.sh
. "$here/session.sh"
session_up() {
  ssh_wrapper=$(bash "$NH" up "$n")
  hosts=$(bash "$NH" hosts)
  export LIBI_TEST_HOSTS=$hosts LIBI_TEST_SSH=$ssh_wrapper LIBI_TEST_FE_ADDR=10.201.0.254
  echo "$PROG: LIBI_TEST_HOSTS=$LIBI_TEST_HOSTS LIBI_TEST_SSH=$LIBI_TEST_SSH" >&2
}
session_down() { bash "$NH" down; }
session_run libi-netns-session "the netns hosts" -- "$@"
