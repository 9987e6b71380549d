#!/usr/bin/env bash
# Record the PMI-1 conversation of every rank of a real MPI job, as a launcher serves it.
#   bench/pmitrace-record.sh OUTDIR [launcher and its options ...]
# e.g.
#   bench/pmitrace-record.sh /tmp/rec8 target/debug/libi-mpiexec -launcher fork \
#       -hosts n1:2,n2:2,n3:2,n4:2 -n 8
#   MPICC=/opt/libi/mpich5/bin/mpicc bench/pmitrace-record.sh /tmp/rec5 target/debug/libi-mpiexec -n 4
#   bench/pmitrace-record.sh /tmp/hy2 mpiexec.hydra -n 2
# Builds tests/programs/hello.c with $MPICC (default mpicc), runs it with the given launcher
# command, each rank wrapped in strace (non-invasive: nothing in the product changes), and
# prints the conversations (bench/pmitrace_extract.py --summary); the raw strace files stay
# in OUTDIR (r<rank>.fd<PMI_FD>.st) for bench/pmitrace_extract.py without --summary.
# This is how sim/workloads/mpich*-init.pmitrace were made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: $0 OUTDIR LAUNCHER [ARGS...]}
shift
[ $# -gt 0 ] || { echo "usage: $0 OUTDIR LAUNCHER [ARGS...]" >&2; exit 2; }
command -v strace >/dev/null || { echo "$0: strace not found" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/r*.st
"${MPICC:-mpicc}" -O2 -DPROG='"hello"' -o "$out/hello" "$here/../tests/programs/hello.c"
cat >"$out/wrap.sh" <<WRAP
#!/bin/sh
exec strace -f -e trace=read,write,sendto,recvfrom -s 65535 -xx \\
    -o "$out/r\${PMI_RANK:-x}.fd\${PMI_FD:-x}.st" "\$@"
WRAP
chmod +x "$out/wrap.sh"
"$@" "$out/wrap.sh" "$out/hello"
python3 "$here/pmitrace_extract.py" --summary "$out"
