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
# shellcheck source=ci/session.sh
. "$here/session.sh"
session_up() {
  bash "$SL" up >&2 || die "could not bring Slurm up (see above)"
  eval "$(bash "$SL" env)"
  export SLURM_CONF LIBI_TEST_SLURM=1
}
session_down() { bash "$SL" down; }
session_run libi-ci-slurm-session "the Slurm cluster" -- "$@"
