#!/usr/bin/env bash
# Record what Open MPI 5's ranks ask of each agent's PMIx companion (what reaches
# `NodeCore::pmix_msg`), per node: the fences (collect or not, the blob's length), the
# clients connected and finalized, direct modex requests.
#   bench/pmix-record.sh NODES PPN [OUTDIR]
# e.g.
#   bench/pmix-record.sh 4 2                 # 4 simulated nodes (fork launcher), 2 ranks each
#   PROG=my.c bench/pmix-record.sh 8 4       # another program than the hello
# Builds $PROG (default pmix-server/tests/programs/hello.c) with Open MPI 5's mpicc
# ($OPENMPI5, default /opt/libi/openmpi5), runs it under target/debug/libi-mpiexec -v
# ($MPIEXEC) with the fork launcher over hosts n1..nNODES, PPN ranks each (block placement:
# node i runs ranks i*PPN .. i*PPN+PPN-1), and reads the agents' debug line for each
# companion message ("from the PMIx server msg=..."). Nothing in the product changes. Prints
# one line per node, then the distinct patterns; the raw log stays in OUTDIR/run.log.
# With one node libpmix completes fences itself unless PMIX_MCA_pmix_server_fence_localonly_opt=0
# is exported (the companion inherits it). This is how sim's `ompi5-init` was recorded
# (sim/workloads/README.md, "PMIx").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=${1:?usage: $0 NODES PPN [OUTDIR]}
ppn=${2:?usage: $0 NODES PPN [OUTDIR]}
out=${3:-$(mktemp -d /tmp/pmix-record.XXXXXX)}
ompi=${OPENMPI5:-/opt/libi/openmpi5}
mpiexec=${MPIEXEC:-$here/../target/debug/libi-mpiexec}
prog=${PROG:-$here/../pmix-server/tests/programs/hello.c}
mkdir -p "$out"
"$ompi/bin/mpicc" -O2 -o "$out/prog" "$prog"
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm,tcp OMPI_MCA_btl_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hosts=$(seq -s, -f 'n%g' 1 "$nodes")
"$mpiexec" -v -launcher fork -hosts "$hosts" --ppn "$ppn" -n $((nodes * ppn)) "$out/prog" \
    >"$out/stdout" 2>"$out/run.log" || { echo "$0: the job failed, see $out/run.log" >&2; exit 1; }
python3 - "$out/run.log" "$nodes" "$ppn" <<'PY'
import re, sys
from collections import OrderedDict
log, nodes, ppn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = OrderedDict((f"n{i + 1}", {"ranks": [], "fences": [], "fin": 0, "dmodex": 0, "other": []})
                  for i in range(nodes))
pat = re.compile(r"libi-nla@(\S+): debug: from the PMIx server msg=(.*)$")
for line in open(log, errors="replace"):
    m = pat.search(line)
    if not m or m.group(1) not in per:
        continue
    n, msg = per[m.group(1)], m.group(2)
    kind = msg.split()[0]
    f = dict(w.split("=", 1) for w in msg.split()[1:] if "=" in w)
    if kind == "ClientConnected":
        n["ranks"].append(int(f["rank"]))
    elif kind == "ClientFinalized":
        n["fin"] += 1
    elif kind == "Fence":
        n["fences"].append(("c" if f["collect"] == "true" else "n") + f["blob"])
    elif kind == "DirectModex":
        n["dmodex"] += 1
    else:
        n["other"].append(kind)
print(f"# {nodes} nodes x {ppn} ranks: per node, the fences in order (c: collect, n: no data;"
      " blob bytes)")
pats = OrderedDict()
for host, n in per.items():
    r = sorted(n["ranks"])
    line = (f"{host:>5} ranks {r[0] if r else '-'}..{r[-1] if r else '-'} ({len(r)} connected,"
            f" {n['fin']} finalized, {n['dmodex']} dmodex) fences {' '.join(n['fences'])}"
            + (f" other {','.join(n['other'])}" if n["other"] else ""))
    print(line)
    pats.setdefault((len(r), tuple(n["fences"]), n["fin"], n["dmodex"]), []).append(host)
print("# patterns")
for (k, f, fin, dm), hosts in pats.items():
    print(f"{len(hosts)} node(s) ({hosts[0]}...): {k} ranks, fences {' '.join(f)},"
          f" {fin} finalized, {dm} dmodex")
PY
