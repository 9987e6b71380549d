#!/usr/bin/env bash
# bench/nla-libc-hot/collect.sh: regenerate nla/libc-hot.txt and nla/rust-hot.txt, the C
# library functions and our own (Rust) functions the static libi-nla runs, which
# nla/build.rs has the linker place first (see there and the static-pie crate for why), and
# the same two lists of the front end, mpiexec/libc-hot.txt and mpiexec/rust-hot.txt
# (mpiexec/build.rs).
#
# Runs a spread of jobs (PMI-1, PMI-2, PMGR, MPI_Comm_spawn, output floods, stdin, failures,
# timeouts, binding, several nodes, bad options) with the front end and every agent under gdb
# (trace.py), then writes, for each of the two programs, the union: for the C library, every
# alias of each function, the child side of its spawns (which gdb does not see) and every CPU
# variant (sse2, avx2, evex, avx512...) of the string functions that ran: another CPU picks
# other variants; for its own functions, their symbol names as section-name patterns, the
# hash the compiler adds to each (which changes with the build's features and the compiler)
# replaced by `*`. Needs gdb, mpicc and MPICH 5 (ci/install-deps.sh), a release build. A
# function missing from a list costs resident memory, never correctness.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d /tmp/libi-hot.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# As CI and ci/bench.sh build it (the symbols' hashes differ between -p and --workspace
# builds; the C names do not, and the Rust patterns leave the hashes out).
cargo build --release -q --workspace --bins
NLA=$ROOT/target/release/libi-nla
M=$ROOT/target/release/libi-mpiexec
file "$NLA" | grep -q static-pie || { echo "collect.sh: $NLA is not static (LIBI_NLA_DYNAMIC?)" >&2; exit 1; }
file "$M" | grep -q static-pie || { echo "collect.sh: $M is not static (LIBI_MPIEXEC_DYNAMIC?)" >&2; exit 1; }
mpicc -O2 -DPROG='"hello"' -o "$WORK/hello" tests/programs/hello.c
"${LIBI_MPICH5:-/opt/libi/mpich5}/bin/mpicc" -O2 -o "$WORK/spawn" tests/programs/spawn.c
cc -O2 -o "$WORK/pmi_exchange" tests/programs/pmi_exchange.c
cc -O2 -o "$WORK/pmgr_exit" tests/programs/pmgr_exit.c
cc -O2 -I/usr/include/slurm -o "$WORK/pmi2_slurm" tests/programs/pmi2_slurm.c -lpmi2
# The fork launcher passes --parent-pid; under gdb the agent's parent is gdb (exec'd in
# place of this wrapper). Without --parent-pid the agent would fork its warden first
# (reaper::fork_warden), and gdb, following the parent, would trace the warden.
cat >"$WORK/nla" <<WRAP
#!/usr/bin/env bash
args=(); skip=0
for a in "\$@"; do
  if [ \$skip = 1 ]; then skip=0; continue; fi
  if [ "\$a" = --parent-pid ]; then skip=1; continue; fi
  args+=("\$a")
done
HOT_OUT=$WORK/hits exec gdb -q -batch -nx -x $ROOT/bench/nla-libc-hot/trace.py --args $NLA "\${args[@]}" --parent-pid \$\$ >/dev/null 2>>$WORK/gdb.err
WRAP
chmod +x "$WORK/nla"
export LIBI_NLA=$WORK/nla
# The front end under gdb too (its hits in fehits.*); it finds the agent through LIBI_NLA.
cat >"$WORK/mpiexec" <<WRAP
#!/usr/bin/env bash
HOT_OUT=$WORK/fehits exec gdb -q -batch -nx -x $ROOT/bench/nla-libc-hot/trace.py --args $M "\$@" 2>>$WORK/gdb.err
WRAP
chmod +x "$WORK/mpiexec"
M=$WORK/mpiexec
job() {
  local rc=0
  timeout 300 "$@" >"$WORK/out" 2>&1 </dev/null || rc=$?
  echo "collect.sh: exit $rc, $(wc -l <"$WORK/out") lines: $*" >&2
}
job "$M" -n 64 true
job "$M" -n 64 "$WORK/hello"
job "$M" -n 8 "$WORK/pmi2_slurm"
job "$M" -n 16 "$WORK/pmi_exchange"
job "$M" --pmgr -n 4 "$WORK/pmgr_exit"
job "$M" -n 2 "$WORK/spawn"
job "$M" -n 2 sh -c 'head -c 20000000 /dev/zero | base64; head -c 2000000 /dev/zero | base64 >&2'
job sh -c "seq 1 100000 | $M -n 2 cat"
job "$M" -n 3 sh -c 'exit 3'
job "$M" -n 2 sh -c 'kill -9 $$'
job env MPIEXEC_TIMEOUT=1 "$M" -n 2 sleep 5
job "$M" -v -bind-to core -n 2 true
job "$M" -launcher fork -hosts a:2,b:2,c:2 -n 6 "$WORK/hello"
job "$M" -l -n 4 hostname
job "$M" -n 2 -outfile-pattern "$WORK/out.%r" -prepend-pattern '[%r] ' echo hi
job "$M" -n 2 -print-all-exitcodes -disable-auto-cleanup sh -c 'exit 1'
job "$M" -n 1 -no-such-option true
job "$M" -n 1 /no/such/program
job "$M" -info
python3 - "$ROOT/target/release" "$WORK" "$ROOT" <<'PY'
import collections, glob, re, subprocess, sys
bins, work, root = sys.argv[1:]


def pattern(name):
    """A Rust symbol as a section-name pattern (static-pie's linker script) without its hash:
    legacy `17h<16 hex>E`, v0 crate disambiguators `Cs<base62>_`; a local copy's `.N` or
    `.llvm.N` suffix (LTO) becomes `*`."""
    p, n = re.subn(r"\.(llvm\.)?\d+$", "", name)
    p = re.sub(r"17h[0-9a-f]{16}E$", "17h*E", p)
    if p.startswith("_R"):
        p = re.sub(r"Cs[0-9a-zA-Z]+_", "Cs*_", p)
    return p + "*" if n else p


def lists(prog, hits, crate, child):
    """Write CRATE/libc-hot.txt and CRATE/rust-hot.txt for the static program PROG from the
    names in WORK/HITS.*, with CHILD (C library functions its children run between clone and
    exec, unseen by gdb) added to the C list."""
    binary, dest, rust_dest = f"{bins}/{prog}", f"{root}/{crate}/libc-hot.txt", f"{root}/{crate}/rust-hot.txt"
    by_addr, by_name, size, nm_size = collections.defaultdict(list), {}, {}, {}
    for line in subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        p = line.split()
        if len(p) == 3:
            p.insert(1, "0")
        if len(p) == 4:
            nm_size[p[3]] = int(p[1], 16)
        if len(p) == 4 and p[2] in "tTwWiI" and not p[3].startswith(("_ZN", "_R")):
            a = int(p[0], 16)
            by_addr[a].append(p[3])
            by_name[p[3]] = a
            size[a] = max(size.get(a, 0), int(p[1], 16))
    ran, seen = set(), []
    for f in sorted(glob.glob(f"{work}/{hits}.*")):
        for name in open(f).read().split():
            if name not in ran:
                ran.add(name)
                seen.append(name)
    if len(ran) < 50:
        sys.exit(f"collect.sh: {prog}: only {len(ran)} functions seen; see {work}/gdb.err")
    # An agent started without --parent-pid forks its warden first (fork_warden) and gdb follows
    # the parent: then the trace is the warden's, and the agent's own loop is missing from it.
    if "epoll_wait" not in ran:
        sys.exit(f"collect.sh: {prog}: its event loop (epoll_wait) never ran under gdb: the "
                 "trace is of another process (an agent's warden: reaper::fork_warden); the "
                 "lists are not rewritten")
    hot = {by_name[n] for n in ran | set(child) if n in by_name}
    isa = r"(sse2|ssse3|sse4_1|sse4_2|sse42|avx|avx2|evex|evex512|avx512\w*|erms|unaligned|rtm|aligned)"
    variant = re.compile(r"^__([a-z0-9]+?)_" + isa + r"(_|$)")
    families = {m.group(1) for a in hot for n in by_addr[a] if (m := variant.match(n))}
    other = {a for n, a in by_name.items()
             if (m := variant.match(n)) and m.group(1) in families and a not in hot}
    with open(dest, "w") as f:
        f.write(f"# C library functions {prog} runs, placed first by the linker ({crate}/build.rs).\n"
                "# Made by bench/nla-libc-hot/collect.sh; first the ones that ran, then the other\n"
                f"# CPU variants of those string functions. {len(hot)} + {len(other)} functions,\n"
                f"# {sum(size[a] for a in hot)} + {sum(size[a] for a in other)} bytes.\n")
        for a in sorted(hot) + sorted(other):
            f.write(by_addr[a][0] + "\n")
    print(f"collect.sh: {dest}: {len(hot)} functions ran, {len(other)} other variants", file=sys.stderr)
    rust, rust_size = [], 0
    for name in seen:
        if name.startswith(("_ZN", "_R")):
            p = pattern(name)
            if p not in rust:
                rust.append(p)
            rust_size += nm_size.get(name, 0)
    with open(rust_dest, "w") as f:
        f.write(f"# {prog}'s own functions that run, in the order they first ran: section-name\n"
                f"# patterns for the linker script of static-pie ({crate}/build.rs). Made by\n"
                f"# bench/nla-libc-hot/collect.sh. {len(rust)} patterns, {rust_size} bytes.\n")
        f.write("".join(p + "\n" for p in rust))
    print(f"collect.sh: {rust_dest}: {len(rust)} patterns", file=sys.stderr)


# The agent's ranks: the child side of its clone (node/src/proc/start.rs, child_main) before execve.
lists("libi-nla", "hits", "nla",
      ["_start", "setsid", "prctl", "getppid", "syscall", "sigemptyset", "sigprocmask", "dup2",
       "fcntl", "fcntl64", "chdir", "execve", "_exit", "__errno_location"])
# The front end's agents and launchers (posix_spawn): the C library's child side of it.
lists("libi-mpiexec", "fehits", "mpiexec",
      ["__spawni_child", "__spawni", "__sigprocmask", "sigprocmask", "__libc_sigaction",
       "__sigaction", "dup2", "__dup2", "close", "__close", "__close_nocancel", "setsid",
       "__setsid", "execve", "__execve", "execvpe", "__execvpe", "_exit", "__errno_location"])
PY
