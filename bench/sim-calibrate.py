#!/usr/bin/env python3
"""Calibrate libi-sim's cost model against real runs: fits the costs (coordinate search in
log space on the squared log error of launch, first fence and total of every case) to the
measured runs of bench/data/sim-validate.json (bench/sim-validate.sh), with every agent and
rank sharing this machine's cores (`cores=2`, processor-shared) and launches and rank starts
blocking the event loop (`loop_launch=1`, as the real driver). Prints the fitted costs as
--cost arguments
and the comparison table. Usage: bench/sim-calibrate.py [VALIDATION.json] [--rounds N]
`libi-sim calibrate` does the same in the tool (its own real runs, the fit in-process, a cost
file for --costs FILE, and a held-out check); this script stays for sim-validate.sh's files."""
import json, math, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
argv = sys.argv[1:]
rounds = 4
if "--rounds" in argv:
    i = argv.index("--rounds"); rounds = int(argv[i + 1]); del argv[i:i + 2]
path = argv[0] if argv else os.path.join(root, "bench/data/sim-validate.json")
sim = os.environ.get("LIBI_SIM", os.path.join(root, "target/release/libi-sim"))
data = json.load(open(path))
cases = data["cases"]

# Starting point: the last fit (Costs::this_vm); the first fit started from the figures
# measured directly (spawn floor, hello timings).
p = {"fe_start": 0.000249, "seq": 1.17e-06, "rem": 0.0015, "fork": 0.00072, "rank_start": 0.0003,
     "cpu_msg": 4e-05, "cpu_pmi": 2.4e-05, "cpu_byte": 2.47e-08, "cpu_send": 1.4,
     "rank_step": 2.83e-06, "rank_exit": 0.00125}
# The structure of the real driver, not fitted: the shared cores, and launches and rank
# starts on the event loop.
fixed = ["--cost", "cores=2", "--cost", "loop_launch=1"]

def run_case(c, params):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sim, "--nodes", str(c["agents"]), "--ppn", str(c["ppn"]), "--tree",
               data.get("tree", "greedy"), "--workload", "mpich-init", "--plan-model", "default", "--kvs-push-max", data.get("kvs_push_max", "1M"), "--json", f.name] + fixed
        for k, v in params.items():
            cmd += ["--cost", f"{k}={v:.9g}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        o = json.load(open(f.name))[0]
    return (o["launch"], (o.get("fences_done") or o["fences"] or [float("nan")])[0], o["end"])

def loss(params):
    with ThreadPoolExecutor(2) as ex:
        outs = list(ex.map(lambda c: run_case(c, params), cases))
    err = 0.0
    for c, (l, f, t) in zip(cases, outs):
        for real, s in ((c["launch_s"], l), (c["first_fence_s"], f), (c["total_s"], t)):
            err += math.log(max(s, 1e-6) / real) ** 2
    return err

best = loss(p)
print(f"start: loss {best:.3f}", file=sys.stderr)
step = 2.0
for r in range(rounds):
    improved = False
    for k in list(p):
        for f in (step, 1 / step):
            q = dict(p); q[k] = p[k] * f
            l = loss(q)
            if l < best - 1e-6:
                best, p, improved = l, q, True
                print(f"round {r}: {k}={q[k]:.3g} loss {l:.3f}", file=sys.stderr)
                break
    if not improved:
        step = math.sqrt(step)
        if step < 1.05:
            break
print(" ".join(fixed + [a for k, v in p.items() for a in ("--cost", f"{k}={v:.3g}")]))
