# shellcheck shell=bash
# Shared by ci/with-slurm.sh and ci/with-netns-hosts.sh (sourced, not run): bring a test
# environment up, run a command in it, and tear it down again whatever happens (normal exit,
# failure, SIGINT, SIGTERM, SIGHUP).
#
#   session_run LOCK WHAT -- CMD [ARGS...]
#
# The caller defines PROG, die, session_up (bring the environment up and export what CMD
# needs; runs in this shell) and session_down. One session per LOCK at a time: a second one
# waits for the first (WHAT names the environment in that message). The exit status is
# CMD's (128+signal if it was killed by a signal).

session_run() {
  local lock=/run/lock/$1.lock what=$2
  shift 3
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  mkdir -p /run/lock
  exec 8>"$lock"
  if ! flock -n 8; then
    echo "$PROG: another run holds $what; waiting..." >&2
    flock -w 3600 8 || die "timed out waiting for $lock"
  fi
  child=
  trap _session_teardown EXIT
  trap '_session_signal INT 2' INT
  trap '_session_signal TERM 15' TERM
  trap '_session_signal HUP 1' HUP

  # Nothing we start may inherit the session lock (fd 8), or it could outlive us.
  session_up 8>&-

  # CMD runs in the background so that signals reach us while it runs (a foreground child
  # would delay our traps until it exits). Background jobs of a non-interactive shell start
  # with SIGINT/SIGQUIT ignored; env --default-signal gives CMD normal Ctrl-C behaviour back.
  env --default-signal=INT,QUIT "$@" 8>&- &
  child=$!
  local rc=0
  while :; do
    wait "$child" && rc=0 || rc=$?
    # wait returns >128 when a trapped signal interrupted it; loop until CMD really ended.
    kill -0 "$child" 2>/dev/null || break
  done
  # If a signal interrupted the last wait just as CMD ended, CMD is not reaped yet: collect it.
  wait "$child" 2>/dev/null && rc=0 || { local r=$?; [ "$r" -eq 127 ] || rc=$r; }
  child=
  exit "$rc"
}

_session_teardown() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  session_down 8>&- >&2 || echo "$PROG: warning: teardown failed" >&2
  exit "$rc"
}

_session_signal() { # forward to CMD; session_run then collects its status
  if [ -n "$child" ]; then
    kill -"$1" "$child" 2>/dev/null || true
  else
    exit $((128 + $2)) # still setting up: the EXIT trap tears down
  fi
}
