#!/usr/bin/env python3
"""Run a command (a process manager: libi-mpiexec, mpiexec.hydra) and watch the peak RSS of
every process of its tree; used by ci/stress.sh, reusable anywhere.

  ci/rss_watch.py --out FILE [--limit S] [--term-after S] [--rss-limit-mb MB]
                  [--interval S] [--linger S] [--pidfile FILE] -- CMD [ARGS...]

CMD inherits our stdin, stdout and stderr (and our signal dispositions, SIGPIPE restored to
default); once it runs we point our own stdin and stdout at /dev/null, so we hold no pipe open
behind it. Every INTERVAL (0.1 s) we walk the process tree under CMD (processes keep being
watched after they are reparented, e.g. agents of a front end that died) and read VmRSS and
VmHWM from /proc/PID/status; VmHWM is the peak over the process's life, so the last reading
before it exits is its peak up to one interval.

  --term-after S   send SIGTERM to CMD after S seconds (a user stopping it)
  --limit S        after S seconds SIGKILL the whole tree ("killed: time limit")
  --rss-limit-mb   any process over this VmRSS gets the whole tree SIGKILLed (default 2048)
  --linger S       after CMD exits, how long its descendants may take to go (default 2);
                   whatever is left after that is reported as left behind and SIGKILLed

FILE gets key=value lines: status (CMD's exit status, 128+N for signal N; we exit with it
too), status_text, wall (seconds from start to CMD's exit), cpu (user and system seconds of CMD
and of every descendant reaped along the chain, from wait4: the whole tree when each process
is waited for by its parent, as a process manager's agents and ranks are), rss (e.g. "fe 12 MiB, nla 8 MiB,
ranks <= 2 MiB"), peak_fe / peak_agent (MiB, the agents' largest), notes (what was killed, what
was left behind, how VmRSS of the front end and agents moved from 1 s to the end when
that is over 20 MiB). Roles: CMD itself is "fe"; libi-nla is "nla";
hydra_pmi_proxy is "proxy"; anything else below them is a rank (ranks and their children).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

AGENTS = {"libi-nla": "nla", "hydra_pmi_prox": "proxy", "hydra_pmi_proxy": "proxy"}
# Programs that only exec the process they are run for (ci/stress.sh starts a front end and
# each rank through bench/into_cgroup.c): a process seen only as one of these was not
# sampled as what it became.
WRAPPERS = {"into_cgroup"}


def proc_stat(pid):
    """(ppid, starttime, state) of pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[19]), rest[0]


def proc_mem(pid):
    """(comm, VmRSS kB, VmHWM kB) of pid, or None (gone, or a zombie with no memory)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    name, rss, hwm = "?", None, None
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else "?"
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    if rss is None or hwm is None:
        return None
    return name, rss, hwm


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


class Tree:
    """Processes of CMD's tree, keyed by (pid, starttime) so a reused pid is not confused."""

    def __init__(self, root):
        self.root = root
        self.root_start = None
        self.procs = {}  # (pid, start) -> {name, role, rss (max), hwm (max), now (last VmRSS),
        #                                rss1 (VmRSS at the first sample after 1 s)}

    def scan(self, t):
        """Refresh the tree; return the live (pid, start) keys (zombies are not live)."""
        stats = {}
        for pid in all_pids():
            s = proc_stat(pid)
            if s:
                stats[pid] = s
        children = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        if self.root_start is None and self.root in stats:
            self.root_start = stats[self.root][1]
        # Walk down from CMD and from every process already known (reparented ones too); a
        # known pid only counts while its start time matches (pids get reused).
        todo = [(self.root, self.root_start)] + list(self.procs)
        seen, live = set(), []
        while todo:
            pid, want_start = todo.pop()
            if pid in seen or pid not in stats:
                continue
            _, start, state = stats[pid]
            if want_start is not None and start != want_start:
                continue
            seen.add(pid)
            key = (pid, start)
            todo.extend((c, None) for c in children.get(pid, []))
            if state == "Z":
                continue
            mem = proc_mem(pid)
            if mem is None:
                continue
            name, rss, hwm = mem
            p = self.procs.get(key)
            if p is None or p["name"] != name:
                # New, or it exec'd: between fork and exec a child shows its parent's memory.
                role = "fe" if pid == self.root else AGENTS.get(name, "rank")
                p = self.procs[key] = {"name": name, "role": role, "rss": 0, "hwm": 0}
            p["rss"] = max(p["rss"], rss)
            p["hwm"] = max(p["hwm"], hwm)
            p["now"] = rss
            if t >= 1.0 and "rss1" not in p:
                p["rss1"] = rss
            live.append(key)
        return live

    def kill(self, keys, sig=signal.SIGKILL):
        for pid, start in keys:
            s = proc_stat(pid)
            if s and s[1] == start:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


def mib(kb):
    return kb / 1024.0


def fmt_mib(v):
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def rss_cell(tree, wall):
    procs = sorted(tree.procs.items(), key=lambda kv: kv[0])
    parts = []
    procs = [(k, p) for k, p in procs if p["name"] not in WRAPPERS]
    fe = [p for _, p in procs if p["role"] == "fe"]
    if fe:
        parts.append(f"fe {fmt_mib(mib(max(p['hwm'] for p in fe)))} MiB")
    else:
        # (wait4's ru_maxrss is no substitute: it counts our own memory from before the exec)
        parts.append(f"fe not sampled (gone after {wall * 1000:.0f} ms)")
    for role in ("nla", "proxy"):
        ag = [p for _, p in procs if p["role"] == role]
        if ag:
            parts.append(f"{role} " + "/".join(fmt_mib(mib(p["hwm"])) for p in ag) + " MiB")
    ranks = [p for _, p in procs if p["role"] == "rank"]
    if ranks:
        parts.append(f"ranks <={fmt_mib(mib(max(p['hwm'] for p in ranks)))} MiB")
    return ", ".join(parts)


def status_text(st):
    if st is None:
        return "?"
    if st > 128:
        try:
            return f"{st} ({signal.Signals(st - 128).name})"
        except ValueError:
            pass
    return str(st)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=float, default=60)
    ap.add_argument("--term-after", type=float)
    ap.add_argument("--rss-limit-mb", type=float, default=2048)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--linger", type=float, default=2)
    ap.add_argument("--pidfile", help="our pid goes here while we run")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")

    notes = []
    stop = threading.Event()
    done = threading.Event()
    result = {}
    tree = None

    def on_signal(signum, _frame):
        notes.append(f"watcher got {signal.Signals(signum).name}")
        if tree:
            tree.kill(list(tree.procs))
        stop.set()

    # Keep SIGINT as we got it when it is ignored (CMD inherits the disposition); otherwise
    # clean up on it, as on SIGTERM and SIGHUP.
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(s) != signal.SIG_IGN:
            signal.signal(s, on_signal)

    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")

    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, close_fds=True, restore_signals=True)
    tree = Tree(proc.pid)

    # Hold no pipe of the caller's open behind CMD.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)

    def waiter():
        _, st, ru = os.wait4(proc.pid, 0)
        result["t"] = time.monotonic() - t0
        result["cpu"] = (ru.ru_utime, ru.ru_stime)
        code = os.waitstatus_to_exitcode(st)
        result["status"] = 128 - code if code < 0 else code
        done.set()

    threading.Thread(target=waiter, daemon=True).start()

    termed_at = None
    killed = False
    last_live = []
    while not done.is_set() and not stop.is_set():
        t = time.monotonic() - t0
        last_live = tree.scan(t)
        over = [(k, p) for k, p in tree.procs.items() if k in last_live and p["now"] > a.rss_limit_mb * 1024]
        if over and not killed:
            k, p = over[0]
            limit = (
                f"{a.rss_limit_mb / 1024:g} GB" if a.rss_limit_mb % 1024 == 0 else f"{a.rss_limit_mb:g} MiB"
            )
            notes.append(
                f"killed: RSS over {limit} ({p['role']} {p['name']} "
                f"{fmt_mib(mib(p['now']))} MiB at {t:.1f} s)"
            )
            tree.kill(list(tree.procs))
            killed = True
        if a.term_after is not None and termed_at is None and t >= a.term_after:
            termed_at = t
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except OSError:
                pass
        if t >= a.limit and not killed:
            notes.append(f"killed: time limit {a.limit:g} s")
            tree.kill(list(tree.procs))
            killed = True
        done.wait(a.interval)
    done.wait(5)
    if not done.is_set():  # cannot happen unless CMD ignores SIGKILL (stuck in D state)
        notes.append("front end did not exit after SIGKILL")

    # After CMD: its descendants have --linger seconds to go.
    end = time.monotonic() + a.linger
    live = []
    while True:
        live = [k for k in tree.scan(time.monotonic() - t0) if k[0] != proc.pid]
        if not live or time.monotonic() >= end or killed:
            break
        time.sleep(0.05)
    if live:
        names = sorted({tree.procs[k]["name"] for k in live})
        if not killed:
            notes.append(f"left behind {a.linger:g} s after exit: {len(live)} ({', '.join(names)}), killed")
        tree.kill(live)
        # Make sure they are gone before we report (a killed tree is part of this case).
        end = time.monotonic() + 5
        while time.monotonic() < end and [k for k in tree.scan(0) if k[0] != proc.pid]:
            time.sleep(0.05)

    wall = result.get("t", time.monotonic() - t0)
    st = result.get("status")
    if termed_at is not None and killed:
        notes.append(f"SIGTERM at {termed_at:.1f} s, not gone when killed {wall - termed_at:.2f} s later")
    elif termed_at is not None:
        notes.append(f"SIGTERM at {termed_at:.1f} s, exit {wall - termed_at:.2f} s later")
    grew = [
        f"{p['role']} {fmt_mib(mib(p['rss1']))} -> {fmt_mib(mib(p['now']))}"
        for _, p in sorted(tree.procs.items())
        if p["role"] != "rank" and "rss1" in p and p["now"] - p["rss1"] > 20 * 1024
    ]
    if grew:
        notes.append(f"VmRSS at 1 s -> last sample (MiB): {', '.join(grew)}")
    fe_peak = max((p["hwm"] for p in tree.procs.values() if p["role"] == "fe"), default=0)
    ag_peak = max((p["hwm"] for p in tree.procs.values() if p["role"] in ("nla", "proxy")), default=0)
    with open(a.out, "w") as f:
        f.write(f"status={'' if st is None else st}\n")
        f.write(f"status_text={status_text(st)}\n")
        f.write(f"wall={wall:.3f}\n")
        if "cpu" in result:
            f.write(f"cpu={result['cpu'][0]:.3f} {result['cpu'][1]:.3f}\n")
        f.write(f"rss={rss_cell(tree, wall)}\n")
        f.write(f"peak_fe={mib(fe_peak):.1f}\n")
        f.write(f"peak_agent={mib(ag_peak):.1f}\n")
        f.write(f"killed={1 if killed else 0}\n")
        f.write(f"notes={'; '.join(notes)}\n")
    if a.pidfile:
        os.unlink(a.pidfile)
    sys.exit(st if st is not None and 0 <= st < 256 else 255)


if __name__ == "__main__":
    main()
