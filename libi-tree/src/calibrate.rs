//! Fitting the launch model to a launch report, and comparing measured with modeled launch
//! times (`libi-tree calibrate` and `libi-tree plot`). Pure functions of a [`Report`].
//!
//! # The whole-model fit (`libi-tree calibrate`)
//!
//! [`fit_model`] takes any number of reports ([`Run`]s: any shapes, any sizes), rebuilds
//! each launch tree, evaluates the model on it from the root's `ready` on (open loop: no
//! measured time but the root's enters a modeled one) and minimises the squared difference
//! of measured and modeled `connected` over every launched node of every run. The paper's
//! `SEQ` and `REM` are linear in that (a node's time is `depth × REM + (sum of order − 1
//! along its path) × SEQ`) and come from the normal equations; the extensions of
//! [`LaunchModel`] (shared cores `C`, CPU `W` of `REM`, the parent's per-hello CPU `A`,
//! held setups) need the event-driven evaluation and are fitted by Nelder–Mead from several
//! starts. R² is `1 − SSE/SST` over all those nodes: how much of the spread of connect
//! times, across shapes and sizes, the model explains.
//!
//! # The per-launch line (`line` in the JSON)
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
use libi::tree::{evaluate, LaunchModel, ParentsError, Tree};

/// A report the model cannot be fitted to or compared with, or a fit that cannot be made
/// (one line).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrateError {
    #[error("no samples to fit")]
    NoSamples,
    #[error("a sample is not a finite number")]
    SampleNotFinite,
    #[error("the report has no launch records")]
    NoRecords,
    /// A launch record whose parent has no node report.
    #[error("launch of node {node} names parent {parent}, which has no node report")]
    NoParentReport { node: u32, parent: u32 },
    #[error("node {0} is launched more than once")]
    LaunchedTwice(u32),
    #[error("the launch records form a cycle: no node is the root")]
    NoRoot,
    /// More than one node is a parent without being launched: those nodes.
    #[error(
        "the launch records have several roots (nodes {}): not one tree",
        .0.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    SeveralRoots(Vec<u32>),
    #[error("the launch records form a cycle: some nodes do not reach the root")]
    Unreachable,
    /// The rebuilt parent array is not a tree.
    #[error(transparent)]
    Tree(ParentsError),
    #[error("no launched nodes to fit")]
    NoLaunchedNodes,
    /// [`Cores::Fixed`] with a count that is not positive.
    #[error("shared cores must be a positive number, got {0}")]
    Cores(f64),
    #[error("node {0}: ready is not a finite number")]
    ReadyNotFinite(u32),
    #[error("node {0} has more than one node report")]
    TwoReports(u32),
    #[error("launch of node {node} (parent {parent}): a time is not a finite number")]
    TimeNotFinite { node: u32, parent: u32 },
    #[error("launch of node {node} (parent {parent}): order must be 1-based, got 0")]
    OrderZero { node: u32, parent: u32 },
    #[error("node {0} is its own parent")]
    OwnParent(u32),
    /// A launch that "connected" before it started: the child never connected back.
    #[error(
        "launch of node {node} (parent {parent}) connected at {connected} s, before it started \
         at {start} s: the child never connected back"
    )]
    ConnectedBeforeStart { node: u32, parent: u32, connected: f64, start: f64 },
}

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
pub fn samples(report: &Report) -> Result<Vec<(f64, f64)>, CalibrateError> {
    let ready = ready_by_node(report)?;
    let mut out = Vec::new();
    for rec in launch_records(report) {
        check_record(rec)?;
        let Some(&r) = ready.get(&rec.parent) else {
            return Err(CalibrateError::NoParentReport { node: rec.node, parent: rec.parent });
        };
        out.push((f64::from(rec.order - 1), rec.connected - r));
    }
    Ok(out)
}

/// Fits `y = REM + SEQ*x` to `points` by least squares. Errors when `points` is empty or
/// holds a non-finite value.
pub fn fit_line(points: &[(f64, f64)]) -> Result<Fit, CalibrateError> {
    if points.is_empty() {
        return Err(CalibrateError::NoSamples);
    }
    if points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return Err(CalibrateError::SampleNotFinite);
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
pub fn calibrate(report: &Report) -> Result<Fit, CalibrateError> {
    let pts = samples(report)?;
    if pts.is_empty() {
        return Err(CalibrateError::NoRecords);
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
pub fn launch_tree(report: &Report) -> Result<LaunchTree, CalibrateError> {
    let mut by_child: HashMap<u32, &LaunchRecord> = HashMap::new();
    let mut kids: BTreeMap<u32, Vec<&LaunchRecord>> = BTreeMap::new();
    for rec in launch_records(report) {
        check_record(rec)?;
        if by_child.insert(rec.node, rec).is_some() {
            return Err(CalibrateError::LaunchedTwice(rec.node));
        }
        kids.entry(rec.parent).or_default().push(rec);
    }
    if by_child.is_empty() {
        return Err(CalibrateError::NoRecords);
    }
    let roots: BTreeSet<u32> = kids.keys().copied().filter(|p| !by_child.contains_key(p)).collect();
    let root = match roots.len() {
        1 => roots.iter().copied().next().unwrap_or(0),
        0 => return Err(CalibrateError::NoRoot),
        _ => return Err(CalibrateError::SeveralRoots(roots.into_iter().collect())),
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
        return Err(CalibrateError::Unreachable);
    }
    let tree = Tree::from_parents(&parents).map_err(CalibrateError::Tree)?;
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
pub fn compare(report: &Report, model: &LaunchModel) -> Result<Vec<NodeTimes>, CalibrateError> {
    Ok(Run::new(report)?.times(model))
}

// ------------------------------------------------------------------ the whole-model fit

/// Whether [`fit_model`] fits the shared-cores extension.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cores {
    /// The base model only (`cores = 0`).
    Off,
    /// Shared cores, this many (`W` and the base constants are fitted).
    Fixed(f64),
    /// Fit the number of shared cores too.
    Fit,
}

/// One report's launch tree with its measured connect times, ready to be modeled many times.
#[derive(Clone, Debug)]
pub struct Run {
    /// The report's tree shape (`greedy`, `kary:4`, …) and NLA count.
    pub tree: String,
    pub nodes: u32,
    lt: LaunchTree,
    /// The root's `ready` (the model's clock starts there).
    t0: f64,
    /// Measured `connected` of tree index `i` (index 0, the root: unused).
    measured: Vec<f64>,
}

impl Run {
    /// The run of one report (see [`launch_tree`] for what makes a report unusable).
    pub fn new(report: &Report) -> Result<Run, CalibrateError> {
        let lt = launch_tree(report)?;
        let t0 = ready_by_node(report)?.get(&lt.nodes[0]).copied().unwrap_or(0.0);
        let measured = lt.records.iter().map(|r| r.as_ref().map_or(t0, |r| r.connected)).collect();
        Ok(Run { tree: report.tree.clone(), nodes: report.nodes, lt, t0, measured })
    }

    /// Measured and modeled launch time of every launched node (breadth-first order).
    pub fn times(&self, model: &LaunchModel) -> Vec<NodeTimes> {
        let eval = evaluate(&self.lt.tree, model);
        self.lt
            .records
            .iter()
            .zip(&eval.times)
            .filter_map(|(rec, &t)| {
                rec.as_ref().map(|r| NodeTimes {
                    node: r.node,
                    host: r.host.clone(),
                    measured: r.connected,
                    modeled: self.t0 + t,
                })
            })
            .collect()
    }

    /// Measured launch time of the whole run: the last connect.
    pub fn measured_total(&self) -> f64 {
        self.measured.iter().skip(1).copied().fold(self.t0, f64::max)
    }

    /// Sum of squared residuals (measured − modeled) over the launched nodes.
    fn sse(&self, model: &LaunchModel) -> f64 {
        let eval = evaluate(&self.lt.tree, model);
        self.measured
            .iter()
            .zip(&eval.times)
            .skip(1)
            .map(|(&m, &t)| {
                let r = m - (self.t0 + t);
                r * r
            })
            .sum()
    }

    /// Per launched node: (depth, sum over the path from the root of `order − 1`) — the
    /// base model's time is `depth × REM + that × SEQ`.
    fn base_terms(&self) -> Vec<(f64, f64)> {
        let tree = &self.lt.tree;
        let mut terms = vec![(0.0f64, 0.0f64); tree.len()];
        // Breadth-first numbering: a parent comes before its children.
        for p in 0..tree.len() {
            let (d, s) = terms[p];
            for (i, &c) in tree.children(p).iter().enumerate() {
                terms[c] = (d + 1.0, s + i as f64);
            }
        }
        terms
    }
}

/// The launch model fitted to every node of every run (measured against modeled connect
/// times), with how well it fits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelFit {
    pub seq: f64,
    pub rem: f64,
    /// Shared cores (0: the base model fits as well, or sharing was not fitted).
    pub cores: f64,
    /// Of REM, the CPU work on the shared cores.
    pub cpu: f64,
    /// Setups held until the parent's launches are out (see `LaunchModel::hold`).
    pub hold: bool,
    /// CPU of the parent's loop per hello (see `LaunchModel::accept`).
    pub accept: f64,
    /// 1 − SSE / SST of measured against modeled connect times, every node of every run.
    pub r2: f64,
    /// Root mean square of measured − modeled, seconds.
    pub rms: f64,
    /// Launched nodes (samples) and runs (reports).
    pub samples: usize,
    pub runs: usize,
    /// The best base model (no shared cores) over the same samples, and its R².
    pub base_seq: f64,
    pub base_rem: f64,
    pub base_r2: f64,
}

impl ModelFit {
    /// The fitted model (one lane, no batching).
    pub fn model(&self) -> LaunchModel {
        LaunchModel::new(self.seq, self.rem)
            .with_shared(self.cores, self.cpu)
            .with_hold(self.hold)
            .with_accept(self.accept)
    }
}

/// R² and RMS of `model` over `runs`: `(r2, rms, samples)`.
pub fn goodness(runs: &[Run], model: &LaunchModel) -> (f64, f64, usize) {
    let ys: Vec<f64> = runs.iter().flat_map(|r| r.measured.iter().skip(1).copied()).collect();
    let n = ys.len();
    if n == 0 {
        return (0.0, 0.0, 0);
    }
    let mean = ys.iter().sum::<f64>() / n as f64;
    let sst: f64 = ys.iter().map(|y| (y - mean) * (y - mean)).sum();
    let sse: f64 = runs.iter().map(|r| r.sse(model)).sum();
    let r2 = if sst > 0.0 {
        1.0 - sse / sst
    } else if sse == 0.0 {
        1.0
    } else {
        0.0
    };
    (r2, (sse / n as f64).sqrt(), n)
}

/// The base model (`cores = 0`) by linear least squares: every node's modeled time is
/// `depth × REM + (sum of order − 1 along its path) × SEQ`, no intercept.
fn fit_base(runs: &[Run]) -> (f64, f64) {
    let (mut aa, mut ab, mut bb, mut ay, mut by) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for r in runs {
        for ((a, b), &m) in r.base_terms().into_iter().zip(&r.measured).skip(1) {
            let y = m - r.t0;
            aa += a * a;
            ab += a * b;
            bb += b * b;
            ay += a * y;
            by += b * y;
        }
    }
    let det = aa * bb - ab * ab;
    if det.abs() <= f64::EPSILON * aa * bb || bb == 0.0 {
        // SEQ not identifiable (e.g. only chains): REM alone.
        return (0.0, if aa > 0.0 { (ay / aa).max(0.0) } else { 0.0 });
    }
    let rem = (ay * bb - by * ab) / det;
    let seq = (by * aa - ay * ab) / det;
    // Negative constants mean nothing: refit with that one at 0.
    if seq < 0.0 {
        return (0.0, if aa > 0.0 { (ay / aa).max(0.0) } else { 0.0 });
    }
    if rem < 0.0 {
        return ((by / bb).max(0.0), 0.0);
    }
    (seq, rem)
}

/// Most and fewest shared cores a fit considers.
const CORES_MIN: f64 = 0.25;
const CORES_MAX: f64 = 256.0;

/// Nelder–Mead minimisation of `f` from `x0` with initial steps `step`; deterministic.
fn nelder_mead(f: &dyn Fn(&[f64]) -> f64, x0: &[f64], step: &[f64], iters: usize) -> Vec<f64> {
    let d = x0.len();
    let mut pts: Vec<(Vec<f64>, f64)> = Vec::with_capacity(d + 1);
    pts.push((x0.to_vec(), f(x0)));
    for i in 0..d {
        let mut x = x0.to_vec();
        x[i] += step[i];
        let v = f(&x);
        pts.push((x, v));
    }
    for _ in 0..iters {
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (pts[0].1, pts[d].1);
        if (worst - best).abs() <= 1e-12 * (1.0 + best.abs()) {
            break;
        }
        let centroid: Vec<f64> =
            (0..d).map(|j| pts[..d].iter().map(|p| p.0[j]).sum::<f64>() / d as f64).collect();
        let along = |t: f64| -> Vec<f64> {
            (0..d).map(|j| centroid[j] + t * (pts[d].0[j] - centroid[j])).collect()
        };
        let xr = along(-1.0);
        let fr = f(&xr);
        if fr < pts[0].1 {
            let xe = along(-2.0);
            let fe = f(&xe);
            pts[d] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < pts[d - 1].1 {
            pts[d] = (xr, fr);
        } else {
            let xc = if fr < pts[d].1 { along(-0.5) } else { along(0.5) };
            let fc = f(&xc);
            if fc < pts[d].1.min(fr) {
                pts[d] = (xc, fc);
            } else {
                // Shrink towards the best.
                let b = pts[0].0.clone();
                for p in pts.iter_mut().skip(1) {
                    for (x, &bj) in p.0.iter_mut().zip(&b) {
                        *x = bj + 0.5 * (*x - bj);
                    }
                    p.1 = f(&p.0);
                }
            }
        }
    }
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    pts.swap_remove(0).0
}

/// Fits the launch model to every launched node of `runs` by least squares on measured
/// against modeled connect times (see the [module docs](self)): the base model exactly
/// (linear), then, unless `cores` is [`Cores::Off`], the shared-cores extension
/// (`SEQ`, `REM`, `W` and, with [`Cores::Fit`], `C`) by Nelder–Mead from several starts.
/// With `accept`, the parent's per-hello CPU (`A`) is fitted too; with `hold`, setups are
/// held (not fitted: it is how the driver works or not). When the extensions do not fit
/// better than the base model (less than 0.1 % less squared error), the base model is
/// returned (`cores = 0`). Errors when there are no samples.
pub fn fit_model(
    runs: &[Run],
    cores: Cores,
    hold: bool,
    accept: bool,
) -> Result<ModelFit, CalibrateError> {
    let (bseq, brem) = fit_base(runs);
    let base = LaunchModel::new(bseq, brem);
    let (base_r2, base_rms, samples) = goodness(runs, &base);
    if samples == 0 {
        return Err(CalibrateError::NoLaunchedNodes);
    }
    let mut out = ModelFit {
        seq: bseq,
        rem: brem,
        cores: 0.0,
        cpu: 0.0,
        hold: false,
        accept: 0.0,
        r2: base_r2,
        rms: base_rms,
        samples,
        runs: runs.len(),
        base_seq: bseq,
        base_rem: brem,
        base_r2,
    };
    // `Some(0)`: no sharing (only SEQ and REM are fitted, with `hold`).
    let fixed = match cores {
        Cores::Off if !hold && !accept => return Ok(out),
        Cores::Off => Some(0.0),
        Cores::Fixed(c) if !(c.is_finite() && c > 0.0) => return Err(CalibrateError::Cores(c)),
        Cores::Fixed(c) => Some(c),
        Cores::Fit => None,
    };
    // Parameters: x = [SEQ, REM, W/REM, C, A]; out-of-range values are clamped (Nelder–Mead
    // then sees a flat objective there and walks back).
    let model_of = |x: &[f64]| -> LaunchModel {
        let seq = x[0].abs();
        let rem = x[1].abs();
        let frac = x[2].clamp(0.0, 1.0);
        let c = fixed.unwrap_or_else(|| x[3].abs().clamp(CORES_MIN, CORES_MAX));
        let a = if accept { x[4].abs() } else { 0.0 };
        LaunchModel::new(seq, rem).with_shared(c, frac * rem).with_hold(hold).with_accept(a)
    };
    let sse = |x: &[f64]| -> f64 {
        let m = model_of(x);
        runs.iter().map(|r| r.sse(&m)).sum()
    };
    let base_sse = base_rms * base_rms * samples as f64;
    let scale = brem.max(1e-6);
    let mut best: Option<(Vec<f64>, f64)> = None;
    let starts_c: &[f64] = if fixed.is_some() { &[0.0] } else { &[1.0, 2.0, 4.0] };
    let starts_a: &[f64] = if accept { &[0.0, 0.002] } else { &[0.0] };
    for &c0 in starts_c {
        for frac in [0.3, 0.7, 0.95] {
            for rem0 in [brem * 0.5, brem] {
                for &a0 in starts_a {
                    let x0 = [bseq, rem0.max(1e-6), frac, fixed.unwrap_or(c0), a0];
                    let step = [bseq.max(1e-4) * 0.5, scale * 0.2, 0.1, 0.5, 0.001];
                    let x = nelder_mead(&sse, &x0, &step, 400);
                    let v = sse(&x);
                    if best.as_ref().is_none_or(|b| v < b.1) {
                        best = Some((x, v));
                    }
                }
            }
        }
    }
    let Some((x, _)) = best else { return Ok(out) };
    // A final polish from the best point.
    let step =
        [x[0].abs().max(1e-4) * 0.2, x[1].abs().max(1e-6) * 0.1, 0.05, 0.2, x[4].abs().max(1e-4)];
    let x = nelder_mead(&sse, &x, &step, 600);
    let v = sse(&x);
    if v < base_sse * 0.999 {
        let m = model_of(&x);
        out.hold = hold;
        let (r2, rms, _) = goodness(runs, &m);
        out.seq = m.seq;
        out.rem = m.rem;
        out.cores = m.cores;
        out.cpu = m.cpu;
        out.accept = m.accept;
        out.r2 = r2;
        out.rms = rms;
    }
    Ok(out)
}

fn launch_records(report: &Report) -> impl Iterator<Item = &LaunchRecord> {
    report.reports.iter().flat_map(|r| r.launches.iter())
}

fn ready_by_node(report: &Report) -> Result<HashMap<u32, f64>, CalibrateError> {
    let mut ready = HashMap::new();
    for r in &report.reports {
        if !r.ready.is_finite() {
            return Err(CalibrateError::ReadyNotFinite(r.node));
        }
        if ready.insert(r.node, r.ready).is_some() {
            return Err(CalibrateError::TwoReports(r.node));
        }
    }
    Ok(ready)
}

fn check_record(rec: &LaunchRecord) -> Result<(), CalibrateError> {
    let (node, parent) = (rec.node, rec.parent);
    if !rec.start.is_finite() || !rec.connected.is_finite() {
        return Err(CalibrateError::TimeNotFinite { node, parent });
    }
    if rec.order == 0 {
        return Err(CalibrateError::OrderZero { node, parent });
    }
    if node == parent {
        return Err(CalibrateError::OwnParent(node));
    }
    if rec.connected < rec.start {
        let (connected, start) = (rec.connected, rec.start);
        return Err(CalibrateError::ConnectedBeforeStart { node, parent, connected, start });
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
        Report { launcher: "fork".into(), seq, rem, ..wrap(shape, reports) }
    }

    /// The report of `shape` made of `reports` (one per tree node).
    fn wrap(shape: &Shape, reports: Vec<NodeReport>) -> Report {
        let n = reports.len() as u32;
        Report {
            nodes: n - 1,
            ranks: n - 1,
            tree: shape.to_string(),
            launcher: "ssh".into(),
            reports,
            ..Report::default()
        }
    }

    /// A report of `shape` over `n` tree nodes whose connect times are `model`'s (any
    /// model, the event-driven ones included); every NLA ready when it connected.
    fn from_model(shape: &Shape, n: usize, model: &LaunchModel) -> Report {
        let tree = Tree::build(shape, n, model);
        let t = evaluate(&tree, model).times;
        let mut reports: Vec<NodeReport> = (0..n)
            .map(|v| NodeReport {
                node: v as u32,
                host: format!("h{v}"),
                ready: t[v],
                ..NodeReport::default()
            })
            .collect();
        for p in 0..n {
            for (i, &c) in tree.children(p).iter().enumerate() {
                reports[p].launches.push(LaunchRecord {
                    node: c as u32,
                    host: format!("h{c}"),
                    parent: p as u32,
                    order: i as u32 + 1,
                    start: t[p],
                    connected: t[c],
                });
            }
        }
        wrap(shape, reports)
    }

    fn runs_of(model: &LaunchModel, sizes: &[usize]) -> Vec<Run> {
        let shapes = [Shape::Flat, Shape::Kary(2), Shape::Kary(4), Shape::Binomial, Shape::Chain];
        let mut runs = Vec::new();
        for &n in sizes {
            for shape in &shapes {
                runs.push(Run::new(&from_model(shape, n, model)).expect("run"));
            }
        }
        runs
    }

    #[test]
    fn whole_model_fit_recovers_the_base_model() {
        let m = LaunchModel::new(0.004, 0.16);
        let runs = runs_of(&m, &[5, 17, 33]);
        let fit = fit_model(&runs, Cores::Off, false, false).expect("fit");
        assert!((fit.seq - 0.004).abs() < 1e-9 && (fit.rem - 0.16).abs() < 1e-9, "{fit:?}");
        assert!((fit.r2 - 1.0).abs() < 1e-9 && fit.rms < 1e-9, "{fit:?}");
        assert_eq!((fit.cores, fit.hold), (0.0, false));
        assert_eq!(fit.samples, runs.iter().map(|r| r.lt.tree.len() - 1).sum::<usize>());
        // Fitting sharing to data without any: no better than the base model, so base.
        let fit = fit_model(&runs, Cores::Fit, false, true).expect("fit");
        assert_eq!(fit.cores, 0.0, "{fit:?}");
        assert!((fit.r2 - 1.0).abs() < 1e-9, "{fit:?}");
    }

    #[test]
    fn whole_model_fit_recovers_shared_cores() {
        // Data made by the shared-cores model with held setups: the fit finds the constants
        // again, and the paper's model fits them clearly worse.
        let m = LaunchModel::new(0.003, 0.16).with_shared(2.0, 0.06).with_hold(true);
        let runs = runs_of(&m, &[5, 17, 33]);
        for cores in [Cores::Fixed(2.0), Cores::Fit] {
            let fit = fit_model(&runs, cores, true, false).expect("fit");
            let near = |a: f64, b: f64| (a - b).abs() <= 0.02 * b;
            assert!(near(fit.seq, 0.003), "{cores:?} {fit:?}");
            assert!(near(fit.rem, 0.16), "{cores:?} {fit:?}");
            assert!(near(fit.cpu, 0.06), "{cores:?} {fit:?}");
            assert!(near(fit.cores, 2.0), "{cores:?} {fit:?}");
            assert!(fit.hold);
            assert!(fit.r2 > 0.9999, "{cores:?} {fit:?}");
            assert!(fit.base_r2 < fit.r2 - 0.01, "{cores:?} {fit:?}");
            assert_eq!(
                fit.model(),
                LaunchModel::new(fit.seq, fit.rem).with_shared(fit.cores, fit.cpu).with_hold(true)
            );
        }
        // Goodness of the true model is perfect.
        let (r2, rms, n) = goodness(&runs, &m);
        assert!((r2 - 1.0).abs() < 1e-12 && rms < 1e-12 && n > 0);
        assert!(fit_model(&[], Cores::Fit, true, true).is_err());
        assert!(fit_model(&runs, Cores::Fixed(-1.0), true, true).is_err());
        // The parent's loop: data with a per-hello cost, fitted with it.
        let m = m.with_accept(0.004);
        let runs = runs_of(&m, &[5, 17, 33]);
        let fit = fit_model(&runs, Cores::Fixed(2.0), true, true).expect("fit");
        let near = |a: f64, b: f64| (a - b).abs() <= 0.03 * b;
        assert!(near(fit.accept, 0.004) && near(fit.cpu, 0.06) && near(fit.rem, 0.16), "{fit:?}");
        assert!(fit.r2 > 0.9999, "{fit:?}");
        let got = fit.model();
        assert_eq!((got.cores, got.hold, got.slots, got.batch), (m.cores, m.hold, 1, None));
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
        assert!(calibrate(&empty).unwrap_err().to_string().contains("no launch records"));
        assert!(launch_tree(&empty).is_err());

        let good = synthetic(&Shape::Kary(2), 7, 0.01, 0.1, 0.0, &|_| 0.0);
        // Parent without a node report.
        let mut r = good.clone();
        r.reports[1].node = 99;
        assert!(calibrate(&r).unwrap_err().to_string().contains("parent 1"));
        // Duplicate node report.
        let mut r = good.clone();
        let dup = r.reports[3].clone();
        r.reports.push(dup);
        assert!(calibrate(&r).unwrap_err().to_string().contains("more than one"));
        // Never connected (connected = 0 rebased to a large negative time).
        let mut r = good.clone();
        r.reports[0].launches[1].connected = -1.7e9;
        assert!(calibrate(&r).unwrap_err().to_string().contains("never connected"));
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
        assert!(launch_tree(&r).unwrap_err().to_string().contains("more than once"));
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
        assert!(launch_tree(&r).unwrap_err().to_string().contains("cycle"));
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
