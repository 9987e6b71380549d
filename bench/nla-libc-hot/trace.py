# gdb -batch -x trace.py --args BINARY ARGS...
#
# Run a statically linked BINARY under gdb with a one-shot breakpoint on the first
# instruction of every function (the C library's and our own), and write the names of those
# that ran, one per line as they run, to $HOT_OUT.<gdb's pid>. Used by collect.sh. The child
# side of a vfork-style clone runs with the breakpoints lifted (gdb's vfork handling);
# collect.sh adds what it calls.
import os
import subprocess

import gdb

binary = gdb.current_progspace().filename
out = os.environ["HOT_OUT"]
syms = {}
nm = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True)
for line in nm.stdout.splitlines():
    p = line.split()
    if len(p) == 3 and p[1] in "tTwWiI":
        syms.setdefault(int(p[0], 16), p[2])
for c in ["set pagination off", "set confirm off", "set follow-fork-mode parent",
          "set detach-on-fork on", "handle all nostop noprint pass"]:
    gdb.execute(c)
gdb.execute("starti", to_string=True)
base = None
for line in gdb.execute("info proc mappings", to_string=True).splitlines():
    if line.strip().endswith(binary):
        base = int(line.split()[0], 16)
        break
if base is None:
    raise SystemExit(f"trace.py: {binary} is not mapped")
for a in syms:
    gdb.execute(f"tbreak *{base + a:#x}", to_string=True)
# Written as they come: gdb may be killed with the job at its end.
hits = open(f"{out}.{os.getpid()}", "w", buffering=1)
while True:
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
    inf = gdb.selected_inferior()
    if inf.pid == 0 or not inf.threads():
        break
    pc = int(gdb.parse_and_eval("$pc")) - base
    if pc in syms:
        hits.write(syms[pc] + "\n")
hits.close()
