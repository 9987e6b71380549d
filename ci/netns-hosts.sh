#!/usr/bin/env bash
# N test "hosts" on this machine for multi-node tests: each host is a Linux network namespace
# (libin1..libinN) with address 10.201.0.<i>, its own UTS namespace (hostname node<i>), its
# own /etc/hosts (the machine's, and node<i> at 10.201.0.<i> for every i) and its own sshd
# accepting key-only root login. The hosts sit on bridge libibr0, which has
# 10.201.0.254 in the root namespace (the "front end" address that remote proxies connect back
# to). The filesystem is shared (but for /etc/hosts and /dev/shm, which each host has to
# itself): every host sees the same binaries and /tmp.
#
#   ci/netns-hosts.sh up N    create/repair hosts 1..N (removes hosts > N); prints the wrapper
#   ci/netns-hosts.sh down    kill our sshds, delete namespaces and bridge (keys are kept)
#   ci/netns-hosts.sh check   ssh into every host and print `hostname`; non-zero if any fails
#   ci/netns-hosts.sh hosts   print the host list: 10.201.0.1,10.201.0.2,...
#   ci/netns-hosts.sh ssh     print the ssh wrapper path
#
# The ssh wrapper ($LIBI_NETNS_DIR/ssh) takes plain ssh arguments and works as a launcher:
#   libi-mpiexec   -launcher ssh -launcher-exec /tmp/libi-netns/ssh -hosts ... -n 8 prog
#   mpiexec.hydra  -launcher ssh -launcher-exec /tmp/libi-netns/ssh -localhost 10.201.0.254 \
#                  -hosts 10.201.0.1,10.201.0.2 -n 8 prog
# (hydra needs -localhost 10.201.0.254: the machine's own name resolves to 127.0.0.1, which
# inside a host namespace is that host's own loopback.)
#
# Environment:
#   LIBI_NETNS_DIR            state dir: keys, sshd configs, pidfiles, logs (default /tmp/libi-netns)
#   LIBI_NETNS_SHADOW_BASHRC  1 (default): each sshd runs in a private mount namespace with an
#                             empty file bind-mounted over root's ~/.bashrc (the real file is
#                             untouched). Root's .bashrc here runs `pyenv init`, which costs
#                             ~150-200 ms on every ssh command. Consequence: PATH in ssh sessions
#                             is sshd's default, so run remote binaries by absolute path.
#                             0: leave ~/.bashrc alone.
#
# Needs root. Installs openssh-server, openssh-client and iproute2 if missing. Only addresses in
# 10.201.0.0/24 on our own bridge are ever contacted; the hosts have no default route, so they
# cannot reach anything beyond the bridge.
set -Eeuo pipefail

PROG=netns-hosts.sh
DIR=${LIBI_NETNS_DIR:-/tmp/libi-netns}
SHADOW_BASHRC=${LIBI_NETNS_SHADOW_BASHRC:-1}
NET=10.201.0
FE_ADDR=$NET.254
BR=libibr0
NSPFX=libin      # namespaces libin<i>
VETHPFX=libiv    # root-side veth ends libiv<i> (the namespace side is called eth0)
MAXN=200
SSHD=/usr/sbin/sshd
LOCK=/run/lock/libi-netns.lock

die() { echo "$PROG: error: $*" >&2; exit 1; }
say() { echo "$PROG: $*" >&2; }
trap 'rc=$?; echo "$PROG: error: command failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2; exit $rc' ERR

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (creates network namespaces)"; }

check_dir() {
  case "$DIR" in
    /*) ;;
    *) die "LIBI_NETNS_DIR must be an absolute path (got '$DIR')" ;;
  esac
  [[ "$DIR" =~ ^[A-Za-z0-9_./-]+$ ]] || die "LIBI_NETNS_DIR may only contain [A-Za-z0-9_./-] (got '$DIR')"
}

# Serialise up/down (namespace and bridge names are global, whatever the state dir).
take_lock() {
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -w 120 9 || die "timed out waiting for $LOCK (another up/down running?)"
}

ensure_packages() {
  local pkgs=()
  [ -x "$SSHD" ] || pkgs+=(openssh-server)
  command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || pkgs+=(openssh-client)
  command -v ip >/dev/null && command -v ss >/dev/null || pkgs+=(iproute2)
  command -v flock >/dev/null && command -v unshare >/dev/null || die "flock/unshare missing (util-linux)"
  [ ${#pkgs[@]} -eq 0 ] && return 0
  say "installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # apt-get update only when the package lists are missing or the first attempt fails
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt-get update -qq || die "apt-get update failed"
  fi
  if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; then
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null \
      || die "apt-get install ${pkgs[*]} failed"
  fi
  [ -x "$SSHD" ] || die "$SSHD still missing after installing openssh-server"
}

# Existing host indices, sorted numerically (from namespaces, pidfiles and leftover veths).
node_indices() {
  {
    ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$NSPFX\([0-9][0-9]*\)\$/\1/p"
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
      | sed -n "s/^$VETHPFX\([0-9][0-9]*\)\$/\1/p"
    for f in "$DIR/sshd-$NSPFX"*.pid; do
      [ -e "$f" ] || continue
      f=${f##*/sshd-"$NSPFX"}; f=${f%.pid}
      [[ "$f" =~ ^[0-9]+$ ]] && echo "$f"
    done
    true
  } | sort -n -u
}

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -x "$NSPFX$1" >/dev/null; }

# Prints the pid of host i's sshd listener if it is running (pidfile + cmdline verified).
sshd_pid() {
  local i=$1 pf=$DIR/sshd-$NSPFX$1.pid pid
  [ -f "$pf" ] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F -- "-f $DIR/sshd-$NSPFX$i.conf" >/dev/null || return 1
  echo "$pid"
}

wait_gone() {  # pid...: wait up to ~3 s for the pids to exit
  local p _
  for _ in $(seq 1 30); do
    for p in "$@"; do kill -0 "$p" 2>/dev/null && break; p=; done
    [ -z "${p:-}" ] && return 0
    sleep 0.1
  done
  return 1
}

# Remove host i completely; never fails.
node_down() {
  local i=$1 ns=$NSPFX$1 pid pids
  if pid=$(sshd_pid "$i"); then
    kill "$pid" 2>/dev/null || true
    wait_gone "$pid" || kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/sshd-$NSPFX$i.pid" "$DIR/sshd-$NSPFX$i.mode" "$DIR/sshd-$NSPFX$i.conf"
  if ns_exists "$i"; then
    # Anything still inside our namespace (ssh sessions, proxies, ranks a test left behind) was
    # started through our sshd; kill it so the namespace and its veth really go away.
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || pids=
    if [ -n "${pids// /}" ]; then
      # shellcheck disable=SC2086
      kill $pids 2>/dev/null || true
      # shellcheck disable=SC2086
      wait_gone $pids || kill -9 $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  fi
  ip link del "$VETHPFX$i" 2>/dev/null || true
  ip neigh del "$NET.$i" dev "$BR" 2>/dev/null || true
}

ensure_bridge() {
  local other
  if ! ip link show "$BR" >/dev/null 2>&1; then
    other=$(ip -4 -o addr show | awk -v net="$NET." '$4 ~ "^"net {print $2; exit}')
    [ -z "$other" ] || die "$NET.0/24 is already used by interface $other; refusing to create $BR"
    ip link add "$BR" type bridge || die "cannot create bridge $BR (need CAP_NET_ADMIN)"
  fi
  ip -4 -o addr show dev "$BR" | grep -F " $FE_ADDR/24 " >/dev/null || ip addr add "$FE_ADDR/24" dev "$BR"
  ip link set "$BR" up
}

# Create (or repair) the namespace and wiring of host i.
ensure_netns() {
  local i=$1 ns=$NSPFX$1 addr=$NET.$1
  if ns_exists "$i" \
      && ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | grep -F " $addr/24 " >/dev/null \
      && ip -o link show "$VETHPFX$i" 2>/dev/null | grep -F "master $BR" >/dev/null; then
    ip link set "$VETHPFX$i" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    return 0
  fi
  node_down "$i"   # partial leftovers: start from scratch
  ip netns add "$ns"
  # Fixed MAC addresses: a recreated host keeps its MAC, so neighbour (ARP) entries cached by
  # the root namespace or other hosts stay valid. (With random MACs a stale REACHABLE entry
  # made connections to a recreated host hang for ~30-40 s.)
  ip link add "$VETHPFX$i" address "$(printf '02:1b:01:00:01:%02x' "$i")" type veth \
    peer name eth0 address "$(printf '02:1b:01:00:00:%02x' "$i")" netns "$ns"
  ip link set "$VETHPFX$i" master "$BR" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
}

write_keys_and_wrapper() {
  mkdir -p "$DIR"
  chmod 700 "$DIR"
  [ -s "$DIR/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C libi-netns-host -f "$DIR/ssh_host_ed25519_key" <<<y >/dev/null
  [ -s "$DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C libi-netns-client -f "$DIR/id_ed25519" <<<y >/dev/null
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"
  chmod 600 "$DIR/ssh_host_ed25519_key" "$DIR/id_ed25519" "$DIR/authorized_keys"
  : >"$DIR/empty_bashrc"
  # /etc/hosts inside every host (bind-mounted there): the machine's, and every test host's
  # name at its address, as on a cluster whose nodes resolve each other's names (MPICH's
  # test/mpi/spawn/join looks up its own host's name).
  { cat /etc/hosts; for i in $(seq 1 "$MAXN"); do echo "$NET.$i node$i"; done; } >"$DIR/etc_hosts"
  local ssh_bin tmp
  ssh_bin=$(command -v ssh)
  tmp=$(mktemp "$DIR/.ssh.XXXXXX")
  cat >"$tmp" <<EOF
#!/bin/sh
# ssh to the libi netns test hosts (written by ci/netns-hosts.sh); takes ordinary ssh arguments.
exec $ssh_bin -i $DIR/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5 -o KexAlgorithms=curve25519-sha256 "\$@"
EOF
  chmod 755 "$tmp"
  mv -f "$tmp" "$DIR/ssh"
}

write_sshd_config() {
  local i=$1 conf=$DIR/sshd-$NSPFX$1.conf
  cat >"$conf" <<EOF
# sshd for libi netns test host $i (written by ci/netns-hosts.sh)
ListenAddress $NET.$i:22
HostKey $DIR/ssh_host_ed25519_key
PidFile $DIR/sshd-$NSPFX$i.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
# many proxies may connect at once
MaxStartups 200:30:400
MaxSessions 200
EOF
  "$SSHD" -t -f "$conf" || die "sshd rejected $conf"
}

start_sshd() {
  local i=$1 ns=$NSPFX$1 conf=$DIR/sshd-$NSPFX$1.conf log=$DIR/sshd-$NSPFX$1.log rc_file inner
  local pid mode="shadow-bashrc=$SHADOW_BASHRC etc-hosts=1 dev-shm=1"
  if pid=$(sshd_pid "$i"); then
    # running: keep it unless it was started with other settings (.bashrc, /etc/hosts,
    # /dev/shm)
    [ "$(cat "$DIR/sshd-$NSPFX$i.mode" 2>/dev/null)" != "$mode" ] || return 0
    kill "$pid" 2>/dev/null || true
    wait_gone "$pid" || kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/sshd-$NSPFX$i.pid"
  echo "$mode" >"$DIR/sshd-$NSPFX$i.mode"
  : >"$log"
  # own UTS namespace -> hostname node<i>; own mount namespace -> its /etc/hosts and its own
  # /dev/shm (an empty tmpfs, as a host of its own has: MPICH 5 opens its node's segments
  # there by names derived from the job, /dev/shm/mpich_shm_<hash>_<n>, and a job killed
  # while hung leaves them behind; they now go when the host goes, where before they piled
  # up on the machine, 200 files after an afternoon of runs); sshd daemonises and writes its
  # pidfile.
  inner="echo node$i >/proc/sys/kernel/hostname && mount --bind $DIR/etc_hosts /etc/hosts"
  inner="$inner && mount -t tmpfs -o mode=1777,size=50% libi-shm-node$i /dev/shm"
  rc_file=$(getent passwd root | cut -d: -f6)/.bashrc
  if [ "$SHADOW_BASHRC" = 1 ] && [ -f "$rc_file" ]; then
    inner="$inner && mount --bind $DIR/empty_bashrc $rc_file"
  fi
  ip netns exec "$ns" unshare --uts --mount --propagation private \
    sh -c "$inner && exec $SSHD -f $conf -E $log" \
    || die "starting sshd for $ns failed (see $log)"
}

wait_listener() {  # i: until a TCP connect from the root namespace succeeds (10 s)
  local i=$1 deadline=$((SECONDS + 10))
  while [ "$SECONDS" -lt "$deadline" ]; do
    # sshd binds its socket before it daemonises and writes the pidfile: wait for both
    if sshd_pid "$i" >/dev/null && timeout 1 bash -c "exec 3<>/dev/tcp/$NET.$i/22" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  die "sshd of host $NET.$i ($NSPFX$i) not accepting connections after 10 s (log: $DIR/sshd-$NSPFX$i.log)"
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$MAXN" ] \
    || die "usage: $PROG up N   (1 <= N <= $MAXN)"
  need_root; check_dir
  ensure_packages
  take_lock
  mkdir -p /run/sshd          # sshd's privilege-separation dir; sshd refuses to start without it
  chmod 755 /run/sshd
  write_keys_and_wrapper
  ensure_bridge
  local i
  for i in $(node_indices); do [ "$i" -le "$n" ] || node_down "$i"; done
  for i in $(seq 1 "$n"); do
    ensure_netns "$i"
    write_sshd_config "$i"
    start_sshd "$i"
  done
  for i in $(seq 1 "$n"); do wait_listener "$i"; done
  hosts_list >"$DIR/hosts"
  say "up: $n host(s) $(cat "$DIR/hosts") on $BR (front end $FE_ADDR)"
  echo "$DIR/ssh"
}

cmd_down() {
  need_root; check_dir
  take_lock
  local i
  for i in $(node_indices); do node_down "$i"; done
  ip link del "$BR" 2>/dev/null || true
  rm -f "$DIR/hosts"
  say "down: hosts, namespaces and bridge removed (keys kept in $DIR)"
}

hosts_list() {
  local i out=
  for i in $(node_indices); do ns_exists "$i" && out+="${out:+,}$NET.$i"; done
  [ -n "$out" ] || return 1
  echo "$out"
}

cmd_hosts() {
  hosts_list || die "no hosts are up (run: $PROG up N)"
}

cmd_check() {
  local list h fail=0 out
  list=$(hosts_list) || die "no hosts are up (run: $PROG up N)"
  [ -x "$DIR/ssh" ] || die "ssh wrapper $DIR/ssh missing (run: $PROG up N)"
  for h in ${list//,/ }; do
    if out=$("$DIR/ssh" "root@$h" hostname 2>&1); then
      echo "$h $out"
    else
      echo "$h FAILED: $(echo "$out" | tr '\n' ' ')" >&2
      fail=1
    fi
  done
  [ "$fail" -eq 0 ] || die "some hosts are unreachable"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  check) cmd_check ;;
  hosts) cmd_hosts ;;
  ssh) [ -x "$DIR/ssh" ] || die "no wrapper yet (run: $PROG up N)"; echo "$DIR/ssh" ;;
  *) echo "usage: $PROG up N | down | check | hosts | ssh" >&2; exit 2 ;;
esac
