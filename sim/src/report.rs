//! Output: a text table, JSON, and an SVG plot of launch time against nodes.

use crate::cluster::Outcome;
use std::fmt::Write as _;

/// One run with what it cost the simulator.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// `--kvs-push-max` and `--batch` of the run.
    pub push_max: u64,
    pub batch: Option<u32>,
    /// Wall-clock seconds the simulation took, and the simulator's peak RSS so far (MiB).
    pub wall: f64,
    pub rss_mib: f64,
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into())
}

/// The table of a set of runs.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>7} {:>4} {:>8} {:>9} {:>9} {:>5} | {:>8} {:>8} {:>8} {:>8} | {:>6} {:>9} {:>9} {:>9} {:>8} | {:>7} {:>7}",
        "nodes", "ppn", "ranks", "tree", "push", "batch", "launch", "model", "fence1", "end",
        "status", "tree-msgs", "root-in", "L1-max-in", "agentKiB", "wall-s", "RSS-MiB"
    );
    for r in rows {
        let o = &r.outcome;
        let l1 = o.levels.get(1).map(|l| l.max_msgs_in).unwrap_or(0);
        let push =
            if r.push_max == 0 { "lazy".to_string() } else { libi::job::human_bytes(r.push_max) };
        let _ = writeln!(
            s,
            "{:>7} {:>4} {:>8} {:>9} {:>9} {:>5} | {:>8} {:>8.4} {:>8} {:>8} | {:>6} {:>9} {:>9} {:>9} {:>8} | {:>7.2} {:>7.0}",
            o.nodes,
            o.ppn,
            o.ranks,
            o.shape,
            push.replace(' ', ""),
            r.batch.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
            opt(o.launch),
            o.model_launch,
            opt(o.fences.first().copied()),
            opt(o.end),
            o.status,
            o.tree_msgs,
            o.fan_in_msgs,
            l1,
            o.peak_agent_bytes / 1024,
            r.wall,
            r.rss_mib,
        );
    }
    s
}

/// Details of one run: per-level traffic, fences, the failure message, the front end's
/// other lines, warnings.
pub fn details(o: &Outcome) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "tree depth {}, {} events, {} PMI requests", o.depth, o.events, o.pmi_requests);
    let _ = writeln!(s, "level  nodes   msgs-in  bytes-in  max-msgs-in/node  max-bytes-in/node");
    for l in &o.levels {
        let _ = writeln!(
            s,
            "{:>5} {:>6} {:>9} {:>9} {:>17} {:>18}",
            l.level, l.nodes, l.msgs_in, l.bytes_in, l.max_msgs_in, l.max_bytes_in
        );
    }
    let f: Vec<String> = o.fences.iter().map(|t| format!("{t:.4}")).collect();
    let _ =
        writeln!(s, "fences released at: {}", if f.is_empty() { "-".into() } else { f.join(", ") });
    if !o.pmix_nodes.is_empty() {
        let servers = o.pmix_nodes.iter().filter(|n| n.connected > 0).count();
        let sum = |f: fn(&crate::cluster::PmixSeen) -> u64| o.pmix_nodes.iter().map(f).sum::<u64>();
        let _ = writeln!(
            s,
            "PMIx: {servers} servers, {} clients connected, {} finalized; {} messages to the \
             agents, {} fences asked ({} completed by libpmix alone), blobs {} B up, {} B in \
             the answers",
            sum(|n| u64::from(n.connected)),
            sum(|n| u64::from(n.finalized)),
            o.pmix_msgs,
            o.pmix_fences,
            sum(|n| u64::from(n.local)),
            o.pmix_blob_up,
            o.pmix_blob_down
        );
    }
    if !o.colls_done.is_empty() {
        let c: Vec<String> = o.colls_done.iter().map(|t| format!("{t:.6}")).collect();
        let _ = writeln!(s, "PMGR collectives done at: {}", c.join(", "));
    }
    let _ = writeln!(
        s,
        "ranks done {}, waiting {}, PMI/PMGR mismatches {}",
        o.ranks_done, o.ranks_waiting, o.mismatches
    );
    if o.groups.len() > 1 {
        for (i, g) in o.groups.iter().enumerate() {
            let up = g.up.map_or("-".into(), |t| format!("{t:.4}"));
            let _ = writeln!(
                s,
                "group {i} {} ({}): {} agents, {}/{} ranks done, started {:.4}, up {up}",
                g.kvsname, g.workload, g.agents, g.ranks_done, g.ranks, g.started
            );
        }
    }
    if let Some(m) = &o.first_mismatch {
        let _ = writeln!(s, "first mismatch: {m}");
    }
    if let Some(m) = &o.message {
        let _ = writeln!(s, "job: status {}: {m}", o.status);
    }
    // The root core's other lines (a refused spawn, a combined exit status).
    for p in o.prints.iter().filter(|p| Some(*p) != o.message.as_ref()).take(10) {
        let _ = writeln!(s, "front end: {p}");
    }
    for w in o.warnings.iter().take(10) {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// SVG: launch time against nodes (log x), one line per tree shape (simulated: solid with
/// dots; the launch model's prediction: dashed). The launch time plotted is what the model
/// predicts: when the last agent could launch (had its setup).
pub fn svg(rows: &[Row], title: &str) -> String {
    let (w, h, ml, mr, mt, mb) = (760.0, 460.0, 70.0, 170.0, 40.0, 50.0);
    let pts: Vec<(&str, f64, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            let o = &r.outcome;
            (o.agents_up > 0.0).then_some((
                o.shape.as_str(),
                o.nodes as f64,
                o.agents_up,
                o.model_launch,
            ))
        })
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        (w - mr + ml) / 2.0,
        xml(title)
    );
    if pts.is_empty() {
        s.push_str("</svg>\n");
        return s;
    }
    let xmin = pts.iter().map(|p| p.1).fold(f64::MAX, f64::min).max(1.0).log10();
    let xmax = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(10.0).log10();
    let xmax = if xmax - xmin < 0.5 { xmin + 0.5 } else { xmax };
    let ymax = pts.iter().map(|p| p.2.max(p.3)).fold(0.0, f64::max) * 1.08;
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let px = |x: f64| ml + (x.log10() - xmin) / (xmax - xmin) * (w - ml - mr);
    let py = |y: f64| h - mb - y / ymax * (h - mt - mb);
    // axes and grid
    let _ = writeln!(
        s,
        r#"<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        h - mb,
        w - mr,
        h - mb
    );
    let _ = writeln!(s, r#"<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>"#, h - mb);
    let mut e = xmin.floor() as i32;
    while (e as f64) <= xmax + 1e-9 {
        let x = 10f64.powi(e);
        if x.log10() >= xmin - 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{mt}" x2="{0:.1}" y2="{1}" stroke="#ddd"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
                px(x),
                h - mb,
                h - mb + 16.0,
                x
            );
        }
        e += 1;
    }
    for i in 0..=5 {
        let y = ymax * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#eee"/><text x="{2}" y="{3:.1}" text-anchor="end">{4:.2}</text>"##,
            py(y),
            w - mr,
            ml - 6.0,
            py(y) + 4.0,
            y
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">agents (log scale)</text>"#,
        (w - mr + ml) / 2.0,
        h - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">launch time (s)</text>"#,
        (h - mb + mt) / 2.0,
        (h - mb + mt) / 2.0
    );
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"];
    let mut shapes: Vec<&str> = Vec::new();
    for p in &pts {
        if !shapes.contains(&p.0) {
            shapes.push(p.0);
        }
    }
    for (i, sh) in shapes.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mut line: Vec<&(&str, f64, f64, f64)> = pts.iter().filter(|p| p.0 == *sh).collect();
        line.sort_by(|a, b| a.1.total_cmp(&b.1));
        let sim: Vec<String> =
            line.iter().map(|p| format!("{:.1},{:.1}", px(p.1), py(p.2))).collect();
        let model: Vec<String> =
            line.iter().map(|p| format!("{:.1},{:.1}", px(p.1), py(p.3))).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            sim.join(" ")
        );
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-dasharray="5,4"/>"#,
            model.join(" ")
        );
        for p in &line {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(p.1),
                py(p.2)
            );
        }
        let ly = mt + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{c}" stroke-width="2"/><text x="{3}" y="{4}">{5}</text>"#,
            w - mr + 12.0,
            ly,
            w - mr + 36.0,
            w - mr + 42.0,
            ly + 4.0,
            xml(sh)
        );
    }
    let ly = mt + 18.0 * shapes.len() as f64;
    let _ = writeln!(
        s,
        r#"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="black" stroke-dasharray="5,4"/><text x="{3}" y="{4}">model</text>"#,
        w - mr + 12.0,
        ly,
        w - mr + 36.0,
        w - mr + 42.0,
        ly + 4.0
    );
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
