//! Fitting the launch model to a launch report, and comparing measured with modeled launch
//! times (`libi-tree calibrate` and `libi-tree plot`). Pure functions of a [`Report`].
//!
//! # The fit
//!
//! The launch model says `launch(child_i) = launch(parent) + SEQ*(i-1) + REM`. Every
//! [`LaunchRecord`] gives one sample of it:
//!
//! ```text
//! x = order - 1
//! y = connected - ready(parent)      (ready of the NodeReport whose node == record.parent)
//! ```
//!
//! and [`calibrate`] fits `y = REM + SEQ*x` by ordinary least squares. Both times of a sample
//! are taken by the parent's clock, so clock skew between hosts does not enter the fit.
//! When every sample has the same `x` (e.g. every parent launched exactly one child), `SEQ`
//! cannot be identified: the fit then gives `REM` as the mean of `y`, `seq = None` and
//! `r2 = None`.
//!
//! # Measured against modeled
//!
//! [`compare`] rebuilds the launch tree from the records (parent + order), evaluates the
//! model on it with [`evaluate`] and pairs, for every launched node, the measured
//! `connected` time with the modeled one. The modeled times are offset by the root's
//! `ready`, the instant the model's clock starts (about 0 for the front end).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use libi::report::{LaunchRecord, Report};
use libi::tree::{evaluate, LaunchModel, Tree};

/// A least-squares fit of the launch model's constants.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fit {
    /// Seconds between two launches by one parent; `None` when not identifiable (every
    /// sample has the same launch order).
    pub seq: Option<f64>,
    /// Seconds from the start of a parent's launching until its child connects back
    /// (the intercept).
    pub rem: f64,
    /// Coefficient of determination; `None` when `seq` is. 1 when every `y` is the same and
    /// fitted exactly.
    pub r2: Option<f64>,
    /// Number of samples (launch records).
    pub samples: usize,
    /// Root mean square of the residuals, in seconds.
    pub rms: f64,
    /// One line on why `seq` is `None` (not part of the JSON form).
    #[serde(skip)]
    pub note: Option<String>,
}

impl Fit {
    /// The paper's model with the fitted constants; `seq_fallback` stands in for an
    /// unidentified `SEQ`.
    pub fn model(&self, seq_fallback: f64) -> LaunchModel {
        LaunchModel::new(self.seq.unwrap_or(seq_fallback), self.rem)
    }
}

/// One `(x, y)` sample per launch record: `x = order - 1`, `y = connected - ready(parent)`.
///
/// Errors (one line) when a record names a parent with no [`NodeReport`](libi::report::NodeReport),
/// when two node reports share a node id, when a time is not finite, when `order` is 0, or
/// when a launch "connected" before it started (the child never connected back).
pub fn samples(report: &Report) -> Result<Vec<(f64, f64)>, String> {
    let ready = ready_by_node(report)?;
    let mut out = Vec::new();
    for rec in launch_records(report) {
        check_record(rec)?;
        let Some(&r) = ready.get(&rec.parent) else {
            return Err(format!(
                "launch of node {} names parent {}, which has no node report",
                rec.node, rec.parent
            ));
        };
        out.push((f64::from(rec.order - 1), rec.connected - r));
    }
    Ok(out)
}

/// Fits `y = REM + SEQ*x` to `points` by least squares. Errors when `points` is empty or
/// holds a non-finite value.
pub fn fit_line(points: &[(f64, f64)]) -> Result<Fit, String> {
    if points.is_empty() {
        return Err("no samples to fit".to_string());
    }
    if points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return Err("a sample is not a finite number".to_string());
    }
    let n = points.len();
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let (mut sxx, mut sxy, mut syy) = (0.0f64, 0.0f64, 0.0f64);
    for &(x, y) in points {
        let (dx, dy) = (x - mx, y - my);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    let first_x = points[0].0;
    if points.iter().all(|p| p.0 == first_x) {
        // One distinct x: the slope is not identifiable; the best constant is the mean.
        let order = first_x + 1.0;
        let note = if order == 1.0 {
            "SEQ is not identifiable: every launch is its parent's first (order 1), so only \
             REM is fit, as the mean delay"
                .to_string()
        } else {
            format!(
                "SEQ is not identifiable: every launch has the same order ({order}), so only \
                 REM is fit, as the mean delay"
            )
        };
        return Ok(Fit {
            seq: None,
            rem: my,
            r2: None,
            samples: n,
            rms: (syy / nf).sqrt(),
            note: Some(note),
        });
    }
    let seq = sxy / sxx;
    let rem = my - seq * mx;
    let ss_res: f64 = points
        .iter()
        .map(|&(x, y)| {
            let r = y - (rem + seq * x);
            r * r
        })
        .sum();
    // All y equal (to rounding): the horizontal line fits exactly.
    let r2 =
        if syy <= f64::EPSILON * my * my * nf { 1.0 } else { (1.0 - ss_res / syy).clamp(0.0, 1.0) };
    Ok(Fit { seq: Some(seq), rem, r2: Some(r2), samples: n, rms: (ss_res / nf).sqrt(), note: None })
}

/// Fits SEQ and REM to the launch records of `report` (see the [module docs](self)).
/// Errors (one line) when the report has no launch records or an inconsistent one.
pub fn calibrate(report: &Report) -> Result<Fit, String> {
    let pts = samples(report)?;
    if pts.is_empty() {
        return Err("the report has no launch records".to_string());
    }
    fit_line(&pts)
}

/// The launch tree rebuilt from a report's launch records.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTree {
    /// The tree; index 0 is the root. A parent's children, in launch order, have increasing
    /// indices (breadth-first numbering).
    pub tree: Tree,
    /// `nodes[i]`: the report's node id of tree index `i`.
    pub nodes: Vec<u32>,
    /// `records[i]`: the launch record of tree index `i` (`None` for the root).
    pub records: Vec<Option<LaunchRecord>>,
}

/// Rebuilds the launch tree from the launch records: every record is an edge
/// `parent -> node`, and a parent's children are ordered by `order` (then node id). The root
/// is the one parent that was never launched.
pub fn launch_tree(report: &Report) -> Result<LaunchTree, String> {
    let mut by_child: HashMap<u32, &LaunchRecord> = HashMap::new();
    let mut kids: BTreeMap<u32, Vec<&LaunchRecord>> = BTreeMap::new();
    for rec in launch_records(report) {
        check_record(rec)?;
        if by_child.insert(rec.node, rec).is_some() {
            return Err(format!("node {} is launched more than once", rec.node));
        }
        kids.entry(rec.parent).or_default().push(rec);
    }
    if by_child.is_empty() {
        return Err("the report has no launch records".to_string());
    }
    let roots: BTreeSet<u32> = kids.keys().copied().filter(|p| !by_child.contains_key(p)).collect();
    let root = match roots.len() {
        1 => roots.iter().copied().next().unwrap_or(0),
        0 => return Err("the launch records form a cycle: no node is the root".to_string()),
        _ => {
            let list: Vec<String> = roots.iter().map(u32::to_string).collect();
            return Err(format!(
                "the launch records have several roots (nodes {}): not one tree",
                list.join(", ")
            ));
        }
    };
    for list in kids.values_mut() {
        list.sort_by_key(|r| (r.order, r.node));
    }
    // Breadth first from the root: children get consecutive indices in launch order.
    let mut nodes = vec![root];
    let mut records: Vec<Option<LaunchRecord>> = vec![None];
    let mut parents: Vec<Option<usize>> = vec![None];
    let mut head = 0;
    while head < nodes.len() {
        if let Some(list) = kids.get(&nodes[head]) {
            for rec in list {
                nodes.push(rec.node);
                records.push(Some((*rec).clone()));
                parents.push(Some(head));
            }
        }
        head += 1;
    }
    if nodes.len() != by_child.len() + 1 {
        return Err("the launch records form a cycle: some nodes do not reach the root".into());
    }
    let tree = Tree::from_parents(&parents)?;
    Ok(LaunchTree { tree, nodes, records })
}

/// Measured and modeled launch time of one launched node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeTimes {
    /// The report's node id.
    pub node: u32,
    pub host: String,
    /// When its hello reached its parent (seconds since the front end started).
    pub measured: f64,
    /// The model's launch time on the rebuilt tree, offset by the root's `ready`.
    pub modeled: f64,
}

/// Every launched node's measured and modeled launch time under `model`, in the rebuilt
/// tree's breadth-first order (see [`launch_tree`]).
pub fn compare(report: &Report, model: &LaunchModel) -> Result<Vec<NodeTimes>, String> {
    let lt = launch_tree(report)?;
    let t0 = ready_by_node(report)?.get(&lt.nodes[0]).copied().unwrap_or(0.0);
    let eval = evaluate(&lt.tree, model);
    Ok(lt
        .records
        .iter()
        .zip(&eval.times)
        .filter_map(|(rec, &t)| {
            rec.as_ref().map(|r| NodeTimes {
                node: r.node,
                host: r.host.clone(),
                measured: r.connected,
                modeled: t0 + t,
            })
        })
        .collect())
}

fn launch_records(report: &Report) -> impl Iterator<Item = &LaunchRecord> {
    report.reports.iter().flat_map(|r| r.launches.iter())
}

fn ready_by_node(report: &Report) -> Result<HashMap<u32, f64>, String> {
    let mut ready = HashMap::new();
    for r in &report.reports {
        if !r.ready.is_finite() {
            return Err(format!("node {}: ready is not a finite number", r.node));
        }
        if ready.insert(r.node, r.ready).is_some() {
            return Err(format!("node {} has more than one node report", r.node));
        }
    }
    Ok(ready)
}

fn check_record(rec: &LaunchRecord) -> Result<(), String> {
    if !rec.start.is_finite() || !rec.connected.is_finite() {
        return Err(format!(
            "launch of node {} (parent {}): a time is not a finite number",
            rec.node, rec.parent
        ));
    }
    if rec.order == 0 {
        return Err(format!(
            "launch of node {} (parent {}): order must be 1-based, got 0",
            rec.node, rec.parent
        ));
    }
    if rec.node == rec.parent {
        return Err(format!("node {} is its own parent", rec.node));
    }
    if rec.connected < rec.start {
        return Err(format!(
            "launch of node {} (parent {}) connected at {} s, before it started at {} s: \
             the child never connected back",
            rec.node, rec.parent, rec.connected, rec.start
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use libi::report::NodeReport;
    use libi::tree::Shape;

    /// A report of `shape` over `n` tree nodes (root = front end = node 0) whose times follow
    /// the model exactly, plus `noise(node)` on every `connected`; every NLA's `ready` is its
    /// `connected + setup`. Node ids are tree ids + `id_offset` (the root stays 0).
    fn synthetic(
        shape: &Shape,
        n: usize,
        seq: f64,
        rem: f64,
        setup: f64,
        noise: &dyn Fn(usize) -> f64,
    ) -> Report {
        let model = LaunchModel::new(seq, rem);
        let tree = Tree::build(shape, n, &model);
        // Walk parent-first, so each parent's ready is known before its children.
        let mut ready = vec![0.0f64; n];
        ready[0] = 0.001;
        let mut reports: Vec<NodeReport> = (0..n)
            .map(|v| NodeReport { node: v as u32, host: format!("h{v}"), ..NodeReport::default() })
            .collect();
        let mut stack = vec![0usize];
        while let Some(p) = stack.pop() {
            reports[p].ready = ready[p];
            for (i, &c) in tree.children(p).iter().enumerate() {
                let start = ready[p] + seq * i as f64;
                let connected = ready[p] + seq * i as f64 + rem + noise(c);
                ready[c] = connected + setup;
                reports[p].launches.push(LaunchRecord {
                    node: c as u32,
                    host: format!("h{c}"),
                    parent: p as u32,
                    order: i as u32 + 1,
                    start,
                    connected,
                });
                stack.push(c);
            }
        }
        Report {
            nodes: n as u32 - 1,
            ranks: n as u32 - 1,
            tree: shape.to_string(),
            launcher: "fork".into(),
            seq,
            rem,
            launch_time: 0.0,
            total_time: 0.0,
            reports,
        }
    }

    #[test]
    fn exact_recovery_without_noise() {
        for (shape, n, seq, rem) in [
            (Shape::Greedy, 64, 0.0071, 0.1734),
            (Shape::Kary(4), 50, 0.01, 0.3),
            (Shape::Flat, 10, 0.5, 2.0),
            (Shape::Binomial, 33, 0.002, 0.05),
        ] {
            let r = synthetic(&shape, n, seq, rem, 0.0, &|_| 0.0);
            let fit = calibrate(&r).expect("fit");
            assert_eq!(fit.samples, n - 1);
            let s = fit.seq.expect("SEQ identifiable");
            assert!((s - seq).abs() < 1e-9, "{shape}: SEQ {s} vs {seq}");
            assert!((fit.rem - rem).abs() < 1e-9, "{shape}: REM {} vs {rem}", fit.rem);
            assert!((fit.r2.expect("r2") - 1.0).abs() < 1e-9, "{fit:?}");
            assert!(fit.rms < 1e-9, "{fit:?}");
            assert!(fit.note.is_none());
        }
    }

    #[test]
    fn noisy_fit_is_close() {
        // Deterministic pseudo-noise, uniform in [-1, 1) * 5 ms.
        let noise = |v: usize| {
            let mut z = (v as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z ^= z >> 29;
            z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z ^= z >> 32;
            ((z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * 0.005
        };
        let r = synthetic(&Shape::Flat, 201, 0.01, 0.2, 0.0, &noise);
        let fit = calibrate(&r).expect("fit");
        assert_eq!(fit.samples, 200);
        let s = fit.seq.expect("SEQ");
        assert!((s - 0.01).abs() < 1e-4, "{fit:?}");
        assert!((fit.rem - 0.2).abs() < 3e-3, "{fit:?}");
        let r2 = fit.r2.expect("r2");
        assert!(r2 > 0.99 && r2 < 1.0, "{fit:?}");
        // Uniform noise of half-width 5 ms has RMS 5/sqrt(3) ≈ 2.9 ms.
        assert!(fit.rms > 0.002 && fit.rms < 0.004, "{fit:?}");
    }

    #[test]
    fn degenerate_fit_gives_rem_only() {
        // A chain: every parent launches one child, so x = 0 always.
        let noise = |v: usize| if v & 1 == 0 { 0.01 } else { -0.01 };
        let r = synthetic(&Shape::Chain, 11, 0.007, 0.25, 0.003, &noise);
        let fit = calibrate(&r).expect("fit");
        assert_eq!(fit.samples, 10);
        assert_eq!(fit.seq, None);
        assert_eq!(fit.r2, None);
        assert!((fit.rem - 0.25).abs() < 1e-9, "{fit:?}");
        assert!((fit.rms - 0.01).abs() < 1e-9, "{fit:?}");
        assert!(fit.note.as_deref().unwrap_or("").contains("order 1"));
        let json = serde_json::to_value(&fit).expect("json");
        assert!(json["seq"].is_null() && json["r2"].is_null());
        assert_eq!(json.as_object().map(|o| o.len()), Some(5));
        // One sample only.
        let fit = fit_line(&[(2.0, 1.5)]).expect("fit");
        assert_eq!((fit.seq, fit.rem, fit.samples), (None, 1.5, 1));
        assert!(fit.note.as_deref().unwrap_or("").contains("(3)"));
    }

    #[test]
    fn fit_line_edge_cases() {
        assert!(fit_line(&[]).is_err());
        assert!(fit_line(&[(0.0, f64::NAN)]).is_err());
        // Two points: exact line.
        let fit = fit_line(&[(0.0, 1.0), (2.0, 2.0)]).expect("fit");
        assert_eq!((fit.seq, fit.rem, fit.r2), (Some(0.5), 1.0, Some(1.0)));
        // Flat y with spread x: SEQ 0, exact.
        let fit = fit_line(&[(0.0, 0.3), (1.0, 0.3), (2.0, 0.3)]).expect("fit");
        assert_eq!(fit.r2, Some(1.0));
        assert!(fit.seq.expect("seq").abs() < 1e-12);
    }

    #[test]
    fn bad_reports_are_errors() {
        let empty = Report::default();
        assert!(calibrate(&empty).unwrap_err().contains("no launch records"));
        assert!(launch_tree(&empty).is_err());

        let good = synthetic(&Shape::Kary(2), 7, 0.01, 0.1, 0.0, &|_| 0.0);
        // Parent without a node report.
        let mut r = good.clone();
        r.reports[1].node = 99;
        assert!(calibrate(&r).unwrap_err().contains("parent 1"));
        // Duplicate node report.
        let mut r = good.clone();
        let dup = r.reports[3].clone();
        r.reports.push(dup);
        assert!(calibrate(&r).unwrap_err().contains("more than one"));
        // Never connected (connected = 0 rebased to a large negative time).
        let mut r = good.clone();
        r.reports[0].launches[1].connected = -1.7e9;
        assert!(calibrate(&r).unwrap_err().contains("never connected"));
        assert!(launch_tree(&r).is_err());
        // Order 0.
        let mut r = good.clone();
        r.reports[0].launches[0].order = 0;
        assert!(calibrate(&r).is_err());
        // Launched twice.
        let mut r = good.clone();
        let mut again = r.reports[0].launches[0].clone();
        again.parent = 2;
        r.reports[2].launches.push(again);
        assert!(launch_tree(&r).unwrap_err().contains("more than once"));
        // A cycle detached from the root: 5 -> 6 -> 5.
        let mut r = good;
        r.reports[5].launches.push(LaunchRecord {
            node: 6,
            host: "h6".into(),
            parent: 5,
            order: 1,
            start: 1.0,
            connected: 1.1,
        });
        r.reports[2].launches.retain(|l| l.node != 6 && l.node != 5);
        r.reports[6].launches.push(LaunchRecord {
            node: 5,
            host: "h5".into(),
            parent: 6,
            order: 1,
            start: 1.0,
            connected: 1.1,
        });
        assert!(launch_tree(&r).unwrap_err().contains("cycle"));
    }

    #[test]
    fn rebuilt_tree_matches_and_model_matches_measure() {
        let (seq, rem) = (0.01, 0.2);
        let model = LaunchModel::new(seq, rem);
        let mut r = synthetic(&Shape::Greedy, 40, seq, rem, 0.0, &|_| 0.0);
        // Renumber the NLAs (the root stays 0) and shuffle the records' order in the file.
        for nr in &mut r.reports {
            if nr.node != 0 {
                nr.node = 1000 - nr.node;
            }
            for l in &mut nr.launches {
                l.node = 1000 - l.node;
                if l.parent != 0 {
                    l.parent = 1000 - l.parent;
                }
            }
            nr.launches.reverse();
        }
        r.reports.reverse();
        let lt = launch_tree(&r).expect("tree");
        let built = Tree::greedy(40, &model);
        assert_eq!(lt.tree.len(), 40);
        // (`Tree::from_parents` leaves `depth()` at 0 for a parent-before-child numbering,
        // so compare the per-node depths instead.)
        let depth = |t: &Tree| t.depths().into_iter().max().unwrap_or(0);
        assert_eq!(depth(&lt.tree), built.depth());
        assert_eq!(lt.tree.max_fanout(), built.max_fanout());
        assert_eq!(lt.nodes[0], 0);
        for i in 1..40 {
            let rec = lt.records[i].as_ref().expect("record");
            let p = lt.tree.parent(i).expect("parent");
            assert_eq!(lt.nodes[p], rec.parent);
            let pos = lt.tree.children(p).iter().position(|&c| c == i);
            assert_eq!(pos, Some(rec.order as usize - 1));
        }
        let cmp = compare(&r, &model).expect("compare");
        assert_eq!(cmp.len(), 39);
        for t in &cmp {
            assert!((t.measured - t.modeled).abs() < 1e-9, "{t:?}");
        }
        let ev = evaluate(&built, &model);
        let max = cmp.iter().map(|t| t.modeled).fold(0.0, f64::max);
        assert!((max - 0.001 - ev.total).abs() < 1e-9);
    }
}
