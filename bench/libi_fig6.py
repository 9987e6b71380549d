#!/usr/bin/env python3
"""Table (medians) and SVG plot of bench/libi-fig6.sh's runs, and of libi-sim's when given
with --sim FILE (libi-sim --json output of the libi-microbench workload: each outcome's
PMGR collective completion times colls_done give launch = #0, barrier = #1 - #0,
bcast+gather = #3 - #1, scatter+gather = #5 - #3)."""
import json, statistics, sys

args = sys.argv[1:]
sim = []
while "--sim" in args:
    i = args.index("--sim")
    for o in json.load(open(args[i + 1])):
        c = o.get("colls_done") or []
        if o.get("status") != 0 or len(c) < 6:
            continue
        sim.append({"where": "sim", "tree": o["shape"], "nodes": o["nodes"], "launch_s": c[0],
                    "barrier_us": (c[1] - c[0]) * 1e6, "bcast_gather_us": (c[3] - c[1]) * 1e6,
                    "scatter_gather_us": (c[5] - c[3]) * 1e6})
    del args[i:i + 2]
rows = json.load(open(args[0])) + sim
svg = args[1] if len(args) > 1 else None
KEYS = ["launch_s", "barrier_us", "bcast_gather_us", "scatter_gather_us"]
TREES = ["chain", "flat", "greedy", "kary:2", "kary:16", "kary:32"]
groups = {}
for r in rows:
    groups.setdefault((r["where"], r["nodes"], r["tree"]), []).append(r)
med = {k: {m: statistics.median(x[m] for x in v) for m in KEYS} for k, v in groups.items()}
print("| where | nodes | tree | (a) launch s | (b) barrier us | (c) bcast+gather 128 B us | (d) scatter+gather 128 B us |")
print("|---|---:|---|---:|---:|---:|---:|")
for (w, n, t) in sorted(med, key=lambda k: (k[0], k[1], TREES.index(k[2]) if k[2] in TREES else 99)):
    m = med[(w, n, t)]
    print(f"| {w} | {n} | {t} | {m['launch_s']:.4f} | {m['barrier_us']:.0f} | {m['bcast_gather_us']:.0f} | {m['scatter_gather_us']:.0f} |")
if not svg:
    sys.exit(0)
# Four panels (a)-(d): value vs nodes per tree, one line per (where, tree).
W, H, P = 440, 300, 50
colors = dict(zip(TREES, ["#d62728", "#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]))
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2*W}" height="{2*H}" font-family="sans-serif" font-size="11">']
for pi, key in enumerate(KEYS):
    ox, oy = (pi % 2) * W, (pi // 2) * H
    pts = [(n, m[key]) for (w, n, t), m in med.items()]
    if not pts:
        continue
    xs = sorted({p[0] for p in pts})
    import math
    ymax = max(p[1] for p in pts) * 1.5 or 1
    ymin = max(min(p[1] for p in pts if p[1] > 0) / 1.5, ymax * 1e-6)
    lx = lambda n: ox + P + (W - 2 * P) * (math.log(n) - math.log(xs[0])) / max(1e-9, math.log(xs[-1]) - math.log(xs[0]))
    ly = lambda v: oy + H - P - (H - 2 * P) * (math.log(max(v, ymin)) - math.log(ymin)) / (math.log(ymax) - math.log(ymin))
    out.append(f'<text x="{ox+W/2}" y="{oy+18}" text-anchor="middle" font-size="13">({"abcd"[pi]}) {key} (log-log)</text>')
    out.append(f'<line x1="{ox+P}" y1="{oy+H-P}" x2="{ox+W-P}" y2="{oy+H-P}" stroke="black"/>')
    out.append(f'<line x1="{ox+P}" y1="{oy+P}" x2="{ox+P}" y2="{oy+H-P}" stroke="black"/>')
    for x in xs:
        out.append(f'<text x="{lx(x)}" y="{oy+H-P+14}" text-anchor="middle">{x}</text>')
    for f in (0, 0.5, 1):
        v = math.exp(math.log(ymin) + f * (math.log(ymax) - math.log(ymin)))
        out.append(f'<text x="{ox+P-4}" y="{ly(v)+4}" text-anchor="end">{v:.3g}</text>')
    wheres = sorted({w for (w, n, t) in med})
    for w in wheres:
        for t in TREES:
            ser = sorted((n, m[key]) for (ww, n, tt), m in med.items() if ww == w and tt == t)
            if not ser:
                continue
            dash = {"fork": "", "ssh": ' stroke-dasharray="6,3"', "sim": ' stroke-dasharray="2,2"'}.get(w, "")
            d = " ".join(f"{'M' if i == 0 else 'L'}{lx(n):.1f},{ly(v):.1f}" for i, (n, v) in enumerate(ser))
            out.append(f'<path d="{d}" fill="none" stroke="{colors[t]}" stroke-width="1.5"{dash}/>')
    if pi == 0:
        for i, t in enumerate(TREES):
            out.append(f'<text x="{ox+P+8}" y="{oy+P+12+12*i}" fill="{colors[t]}">{t}</text>')
        out.append(f'<text x="{ox+P+90}" y="{oy+P+12}">solid: fork, dashed: ssh, dotted: libi-sim</text>')
out.append("</svg>")
open(svg, "w").write("\n".join(out))
