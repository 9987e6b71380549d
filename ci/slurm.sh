#!/usr/bin/env bash
# A real single-node Slurm cluster (munged + slurmctld + slurmd) on this machine, for the
# Slurm launcher's tests and benchmarks. Run as root on Debian 12.
#
#   ci/slurm.sh up      install the packages if missing, write the config, start the daemons,
#                       wait until the node is idle (idempotent: running daemons are kept)
#   ci/slurm.sh down    stop the daemons `up` started (by pid file; idempotent, never fails)
#   ci/slurm.sh check   srun -N1 -n2 hostname (and the pmi2 plugin is there)
#   ci/slurm.sh status  which of our daemons run; sinfo
#   ci/slurm.sh env     print `export SLURM_CONF=...` (eval "$(ci/slurm.sh env)")
#
# Everything lives under $LIBI_SLURM_DIR (default /tmp/libi-ci-slurm): slurm.conf, the munge
# key and socket, state, spool, pid files and logs (log/*.log). Nothing in /etc is written, so
# the Slurm client commands need SLURM_CONF=$LIBI_SLURM_DIR/slurm.conf (see `env`).
#
# The node is this machine under `hostname -s` at 127.0.0.1 with $LIBI_SLURM_CPUS CPUs
# (default: 8, or the core count if larger) -- more than a small VM has, so `-n 8` jobs fit
# (SlurmdParameters=config_overrides makes slurmd accept the configured count), and the
# partition is OverSubscribe=FORCE so jobs also share CPUs. MpiDefault=none; `--mpi=pmi2`
# works per job. Ports: $LIBI_SLURM_CTLD_PORT (6817), $LIBI_SLURM_SLURMD_PORT (6818).
#
# Notes from bringing this up (Debian 12, slurm-wlm 22.05.8, munge 0.5.15, no systemd):
# * Debian's policy-rc.d keeps apt from starting the packaged services; we start our own.
# * munged refuses to run as root without --force, and wants a+x on the socket's directory.
# * slurmd 22.05 always loads a cgroup plugin (CgroupPlugin=disabled is 23.x); without a
#   cgroup.conf it autodetects and, with proctrack/linuxproc + task/none, creates no cgroups.
set -euo pipefail

PROG=slurm.sh
DIR=${LIBI_SLURM_DIR:-/tmp/libi-ci-slurm}
NODE=$(hostname -s)
CPUS=${LIBI_SLURM_CPUS:-$(( $(nproc) > 8 ? $(nproc) : 8 ))}
CTLD_PORT=${LIBI_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${LIBI_SLURM_SLURMD_PORT:-6818}
export SLURM_CONF=$DIR/slurm.conf
MUNGE_SOCK=$DIR/munge/munge.socket

log() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 1; }

# pid from a pid file, if that process is alive and is the named program.
live_pid() {
  local pf=$1 name=$2 pid
  [ -f "$pf" ] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}

install_pkgs() {
  local pkgs=(slurm-wlm slurmctld slurmd slurm-client munge) missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

write_conf() {
  cat > "$DIR/slurm.conf.new" <<EOF
# written by libi ci/slurm.sh -- single node, everything under $DIR
ClusterName=libi
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
EOF
  if cmp -s "$DIR/slurm.conf.new" "$DIR/slurm.conf"; then
    rm -f "$DIR/slurm.conf.new"
    return 1 # unchanged
  fi
  mv "$DIR/slurm.conf.new" "$DIR/slurm.conf"
  return 0
}

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -1 || true; }

show_logs() {
  local f
  for f in "$DIR"/log/*.log; do
    [ -f "$f" ] || continue
    echo "--- tail $f" >&2
    tail -n 15 "$f" >&2
  done
}

up() {
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  install_pkgs
  mkdir -p "$DIR"/{munge,state,spool,log}
  chmod 755 "$DIR" "$DIR/munge"

  # munge: our own key and socket.
  if [ ! -s "$DIR/munge/munge.key" ]; then
    head -c 1024 /dev/urandom > "$DIR/munge/munge.key.new"
    mv "$DIR/munge/munge.key.new" "$DIR/munge/munge.key"
  fi
  chmod 400 "$DIR/munge/munge.key"
  if ! live_pid "$DIR/munge/munged.pid" munged >/dev/null; then
    rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    munged --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCK" \
      --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed" 9>&- || { show_logs; die "munged did not start"; }
  fi
  munge -S "$MUNGE_SOCK" -n | unmunge -S "$MUNGE_SOCK" >/dev/null \
    || { show_logs; die "munge round trip failed"; }

  # A changed config (other CPU count, ports) needs fresh daemons.
  if write_conf; then
    if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null \
      || live_pid "$DIR/slurmd.pid" slurmd >/dev/null; then
      log "slurm.conf changed: restarting slurmctld and slurmd"
      stop_daemons "$DIR/slurmd.pid" slurmd "$DIR/slurmctld.pid" slurmctld
    fi
  fi

  # -i: ignore saved state (no jobs from an earlier run). Both daemonize and write pid files.
  if ! live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
    slurmctld -f "$SLURM_CONF" -i 9>&- || { show_logs; die "slurmctld did not start"; }
  fi
  if ! live_pid "$DIR/slurmd.pid" slurmd >/dev/null; then
    slurmd -f "$SLURM_CONF" -N "$NODE" 9>&- || { show_logs; die "slurmd did not start"; }
  fi

  local st="" i
  for i in $(seq 1 120); do
    st=$(node_state)
    case "$st" in
      idle | mixed | allocated) break ;;
      down* | drain* | fail*)
        # ReturnToService=2 usually brings it back on slurmd registration; nudge once.
        [ "$i" -eq 10 ] && scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.25
  done
  case "$st" in
    idle | mixed | allocated) ;;
    *) show_logs; die "node $NODE not idle after 30 s (state '${st:-none}'); logs in $DIR/log" ;;
  esac
  log "up: node $NODE $st, $CPUS CPUs (SLURM_CONF=$SLURM_CONF)"
}

# Stop daemons given as "pidfile name" pairs: SIGTERM to all at once (each takes ~2 s to
# shut down here), SIGKILL to whichever is still there after 10 s.
stop_daemons() {
  local pids=() pf name pid i alive
  while [ $# -ge 2 ]; do
    pf=$1 name=$2
    shift 2
    if pid=$(live_pid "$pf" "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid:$name")
    fi
    rm -f "$pf"
  done
  for i in $(seq 1 200); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "${pid%%:*}" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.05
  done
  for pid in "${pids[@]}"; do
    if kill -0 "${pid%%:*}" 2>/dev/null; then
      log "${pid#*:} (${pid%%:*}) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "${pid%%:*}" 2>/dev/null || true
    fi
  done
}

down() {
  set +e
  # Jobs' step daemons (slurmstepd) end with slurmd's jobs; cancel ours first if we can.
  if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null && live_pid "$DIR/munge/munged.pid" munged >/dev/null; then
    timeout 10 scancel --quiet --full --partition=debug 2>/dev/null
    # give slurmstepd a moment to tear its tasks down
    for _ in $(seq 1 20); do
      [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
  stop_daemons "$DIR/slurmd.pid" slurmd "$DIR/slurmctld.pid" slurmctld \
    "$DIR/munge/munged.pid" munged
  log "down (files kept in $DIR)"
  return 0
}

check() {
  [ -f "$SLURM_CONF" ] || die "no $SLURM_CONF: run '$0 up' first"
  sinfo
  echo "--- srun -N1 -n2 hostname"
  timeout 60 srun -N1 -n2 hostname || die "srun -N1 -n2 hostname failed"
  timeout 30 srun --mpi=list 2>&1 | grep -q pmi2 || die "srun --mpi=list shows no pmi2"
  echo "--- ok (srun works, pmi2 plugin present)"
}

status() {
  local d pf name pid
  for d in "munge/munged.pid munged" "slurmctld.pid slurmctld" "slurmd.pid slurmd"; do
    read -r pf name <<<"$d"
    if pid=$(live_pid "$DIR/$pf" "$name"); then
      echo "$name: running ($pid)"
    else
      echo "$name: not running"
    fi
  done
  live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null && timeout 10 sinfo 2>&1 || true
}

# up/down/check serialize on one lock (a concurrent `up` waits for the first one). The
# daemons must not inherit its fd (munged keeps open fds; the lock would never be released).
mkdir -p /run/lock
exec 9>/run/lock/libi-ci-slurm.lock
flock -w 300 9 || die "timed out waiting for /run/lock/libi-ci-slurm.lock"

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check ;;
  status) status ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  *) echo "usage: $0 up|down|check|status|env" >&2; exit 2 ;;
esac
