//! `libi-sim calibrate`: fit the cost model to real runs of this machine, and check the fit
//! on runs it was not fitted to.
//!
//! The real runs are those of `bench/sim-validate.sh`: `libi-mpiexec` with the fork
//! launcher, `K` simulated hosts × `R` ranks of the PMI replay client
//! (`tests/programs/pmi_replay.c`, built here with the C compiler unless `--replay` names
//! one) replaying the workload, every agent and rank on this machine; per case the median
//! of a few runs of the launch report's launch time, first fence (the last rank out) and
//! total time. The fit is `bench/sim-calibrate.py`'s: a coordinate search in log space on
//! the squared log error of those three figures of every case, with the machine's cores
//! shared by every process (`cores`) and launches on the event loop (`loop_launch`), as the
//! real driver does. The simulations run in this process.

use crate::cluster::{Cluster, Config, ConfigError};
use crate::model::{CostError, Costs};
use crate::workload::Trace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The figures fitted (the rest keep their values: the structure of the real driver, the
/// links between processes of one host, which the runs do not exercise).
pub const FITTED: &[&str] = &[
    "fe_start",
    "seq",
    "rem",
    "fork",
    "rank_start",
    "cpu_msg",
    "cpu_pmi",
    "cpu_byte",
    "cpu_send",
    "rank_step",
    "rank_exit",
];

/// One case measured: `agents` hosts × `ppn` ranks, medians over `runs` good runs (seconds
/// from the front end's start).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub agents: u32,
    pub ppn: u32,
    pub runs: u32,
    pub launch: f64,
    pub fence1: f64,
    pub total: f64,
}

/// What the runs are of.
#[derive(Debug, Clone)]
pub struct Setup {
    pub trace: Trace,
    pub shape: libi::tree::Shape,
    pub push_max: u64,
}

/// A calibration step that failed (one line).
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// A simulation's configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A cost tried.
    #[error(transparent)]
    Cost(#[from] CostError),
    #[error("cannot write {}: {error}", .path.display())]
    Write { path: PathBuf, error: std::io::Error },
    /// The C compiler `cc` cannot be run.
    #[error("cannot run the C compiler '{cc}' (set CC, or give --replay): {error}")]
    Compiler { cc: String, error: std::io::Error },
    /// The replay client does not build: the compiler's first line of errors.
    #[error("building the replay client with '{cc}' failed: {first}")]
    Build { cc: String, first: String },
    /// `libi-mpiexec` cannot be run.
    #[error("cannot run {}: {error}", .program.display())]
    Run { program: PathBuf, error: std::io::Error },
    /// A real run that failed or whose ranks did not all succeed: its exit status, how many
    /// of its `n` ranks succeeded, and the first line of its error output.
    #[error("real run {agents} x {ppn} failed ({status}, {ok} of {n} ranks ok): {first}")]
    RealRun {
        agents: u32,
        ppn: u32,
        status: std::process::ExitStatus,
        ok: usize,
        n: u32,
        first: String,
    },
    /// A real run's launch report cannot be read.
    #[error("no launch report {}: {error}", .path.display())]
    NoReport { path: PathBuf, error: std::io::Error },
    /// A real run's launch report does not parse.
    #[error("launch report {}: {error}", .path.display())]
    Report { path: PathBuf, error: serde_json::Error },
}

/// Launch, first fence and end of a simulation of `case` with `costs`; `None` for a figure
/// the run did not reach.
pub fn simulate(
    setup: &Setup,
    case: &Case,
    costs: &Costs,
) -> Result<[Option<f64>; 3], ConfigError> {
    let mut cfg = Config::new(case.agents as usize, case.ppn, setup.trace.clone());
    cfg.shape = setup.shape.clone();
    cfg.costs = *costs;
    cfg.push_max = setup.push_max;
    // The real runs plan their tree for libi-mpiexec's default launch model.
    cfg.plan_model = Some(libi::tree::LaunchModel::DEFAULT);
    let o = Cluster::new(cfg)?.run();
    let fence1 = o.fences_done.first().or(o.fences.first()).copied();
    Ok([o.launch, fence1, o.end])
}

/// The squared log errors of the simulated figures against the measured ones, summed over
/// `cases` (a figure the simulation did not reach counts as 1 µs).
pub fn loss(setup: &Setup, cases: &[Case], costs: &Costs) -> Result<f64, ConfigError> {
    let mut err = 0.0;
    for c in cases {
        let sim = simulate(setup, c, costs)?;
        for (real, s) in [c.launch, c.fence1, c.total].into_iter().zip(sim) {
            err += (s.unwrap_or(0.0).max(1e-6) / real).ln().powi(2);
        }
    }
    Ok(err)
}

/// Fit the [`FITTED`] figures of `start` to `cases`: each round tries each figure ×/÷ the
/// step and keeps the first change that lowers the loss; a round without one halves the
/// step (in log space) until it is under 5 %. `progress` is told of each improvement.
pub fn fit(
    setup: &Setup,
    cases: &[Case],
    start: Costs,
    rounds: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<(Costs, f64), CalibrationError> {
    let figure = |c: &Costs, name: &str| {
        c.figures().into_iter().find(|(n, _)| *n == name).map_or(0.0, |(_, v)| v)
    };
    let mut best_costs = start;
    let mut best = loss(setup, cases, &best_costs)?;
    progress(&format!("start: loss {best:.3}"));
    let mut step = 2.0f64;
    for round in 0..rounds {
        let mut improved = false;
        for name in FITTED {
            for f in [step, 1.0 / step] {
                let mut q = best_costs;
                let v = figure(&q, name) * f;
                q.set(name, &format!("{v:e}"))?;
                let l = loss(setup, cases, &q)?;
                if l < best - 1e-6 {
                    (best, best_costs, improved) = (l, q, true);
                    progress(&format!("round {round}: {name} = {v:.3e}, loss {l:.3}"));
                    break;
                }
            }
        }
        if !improved {
            step = step.sqrt();
            if step < 1.05 {
                break;
            }
        }
    }
    Ok((best_costs, best))
}

/// Where the real runs' programs are.
#[derive(Debug, Clone)]
pub struct Programs {
    pub mpiexec: PathBuf,
    pub replay: PathBuf,
    /// The workload as a file for the replay client.
    pub trace: PathBuf,
}

/// The replay client's source, built when no `--replay` is given.
const REPLAY_C: &str = include_str!("../../tests/programs/pmi_replay.c");
const REPLAY_H: &str = include_str!("../../tests/programs/pmi_raw.h");

/// Build the replay client in `dir` with `$CC` (or `cc`).
pub fn build_replay(dir: &Path) -> Result<PathBuf, CalibrationError> {
    let src = dir.join("pmi_replay.c");
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|error| CalibrationError::Write { path, error })
    };
    write(src.clone(), REPLAY_C)?;
    write(dir.join("pmi_raw.h"), REPLAY_H)?;
    let out = dir.join("pmi_replay");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = match Command::new(&cc).args(["-O2", "-o"]).arg(&out).arg(&src).output() {
        Ok(st) => st,
        Err(error) => return Err(CalibrationError::Compiler { cc, error }),
    };
    if !st.status.success() {
        let err = String::from_utf8_lossy(&st.stderr);
        let first = err.lines().next().unwrap_or("").to_string();
        return Err(CalibrationError::Build { cc, first });
    }
    Ok(out)
}

/// One real run of `agents` × `ppn` (report written to `report`): launch time, first fence
/// (the last rank out of the first fence), total time.
pub fn real_run(
    p: &Programs,
    setup_shape: &str,
    push: &str,
    agents: u32,
    ppn: u32,
    report: &Path,
) -> Result<[f64; 3], CalibrationError> {
    let hosts: Vec<String> = (1..=agents).map(|i| format!("n{i}:{ppn}")).collect();
    let n = agents * ppn;
    let _ = std::fs::remove_file(report);
    let out = Command::new(&p.mpiexec)
        .env("MPIEXEC_TIMEOUT", "600")
        .args(["-launcher", "fork", "-hosts", &hosts.join(","), "--tree", setup_shape])
        .args(["-n", &n.to_string(), "--kvs-push-max", push, "--report"])
        .arg(report)
        .arg(&p.replay)
        .arg(&p.trace)
        .output()
        .map_err(|error| CalibrationError::Run { program: p.mpiexec.clone(), error })?;
    let ok = String::from_utf8_lossy(&out.stdout).matches(&format!(" of {n} ok ")).count();
    if !out.status.success() || ok != n as usize {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").to_string();
        let status = out.status;
        return Err(CalibrationError::RealRun { agents, ppn, status, ok, n, first });
    }
    let path = || report.to_path_buf();
    let text = std::fs::read_to_string(report)
        .map_err(|error| CalibrationError::NoReport { path: path(), error })?;
    let rep: libi::report::Report = serde_json::from_str(&text)
        .map_err(|error| CalibrationError::Report { path: path(), error })?;
    // The first fence: the epoch first completed; its last rank out.
    let first_epoch = rep.reports.iter().flat_map(|r| &r.fences).map(|f| f.epoch).min();
    let fence1 = (rep.reports.iter().flat_map(|r| &r.fences))
        .filter(|f| Some(f.epoch) == first_epoch)
        .map(|f| f.leave)
        .fold(f64::NAN, f64::max);
    Ok([rep.launch_time, fence1, rep.total_time])
}

/// Median of `xs` (`NaN` when empty).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// A case from `runs` figures (launch, first fence, total): the median of each.
pub fn case_of(agents: u32, ppn: u32, runs: &[[f64; 3]]) -> Case {
    let col = |i: usize| median(&mut runs.iter().map(|r| r[i]).collect::<Vec<_>>());
    Case { agents, ppn, runs: runs.len() as u32, launch: col(0), fence1: col(1), total: col(2) }
}

/// Relative error of `sim` against `real`, in percent.
fn err(real: f64, sim: Option<f64>) -> f64 {
    sim.map_or(f64::NAN, |s| (s - real) / real * 100.0)
}

/// The comparison table: every case, measured against simulated with `costs`, its error
/// per figure, and whether the case was fitted or held out. Returns the table and the
/// largest error of the held-out cases.
pub fn table(
    setup: &Setup,
    fitted: &[Case],
    held: &[Case],
    costs: &Costs,
) -> Result<(String, f64), ConfigError> {
    let mut out = format!(
        "{:>6} {:>4} {:>8} | {:>11} {:>8} {:>6} | {:>11} {:>8} {:>6} | {:>10} {:>8} {:>6}\n",
        "agents",
        "ppn",
        "",
        "launch real",
        "sim",
        "err",
        "fence1 real",
        "sim",
        "err",
        "total real",
        "sim",
        "err"
    );
    let mut worst: f64 = 0.0;
    for (cases, what) in [(fitted, "fit"), (held, "held out")] {
        for c in cases {
            let sim = simulate(setup, c, costs)?;
            out.push_str(&format!("{:>6} {:>4} {:>8} |", c.agents, c.ppn, what));
            for (real, s) in [c.launch, c.fence1, c.total].into_iter().zip(sim) {
                let e = err(real, s);
                if what != "fit" {
                    worst = worst.max(if e.is_nan() { f64::INFINITY } else { e.abs() });
                }
                let s = s.map_or("-".to_string(), |s| format!("{s:.4}"));
                out.push_str(&format!(" {real:>11.4} {s:>8} {e:>+5.0}% |"));
            }
            out.pop();
            out.truncate(out.trim_end().len());
            out.push('\n');
        }
    }
    Ok((out, worst))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            trace: Trace::load("mpich-init").expect("builtin"),
            shape: libi::tree::Shape::Greedy,
            push_max: 16 << 20,
        }
    }

    fn measured(setup: &Setup, costs: &Costs, agents: u32, ppn: u32) -> Case {
        let probe = Case { agents, ppn, runs: 1, launch: 1.0, fence1: 1.0, total: 1.0 };
        let [l, f, t] = simulate(setup, &probe, costs).expect("simulates");
        let (l, f, t) = (l.expect("launch"), f.expect("fence"), t.expect("end"));
        Case { launch: l, fence1: f, total: t, ..probe }
    }

    #[test]
    fn medians_of_runs() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
        let c = case_of(4, 2, &[[1.0, 2.0, 3.0], [3.0, 4.0, 9.0], [2.0, 3.0, 4.0]]);
        assert_eq!((c.runs, c.launch, c.fence1, c.total), (3, 2.0, 3.0, 4.0));
    }

    /// "Measurements" made by the simulator itself with other costs than the start's: the
    /// fit on the small cases lowers the loss, and predicts the held-out larger case better
    /// than the costs it started from.
    #[test]
    fn the_fit_moves_toward_the_machine_and_predicts_held_out_cases() {
        let s = setup();
        let truth = Costs { fork: 0.0015, rank_start: 0.002, cpu_pmi: 3e-5, ..Costs::this_vm() };
        let fit_cases = [measured(&s, &truth, 2, 1), measured(&s, &truth, 2, 4)];
        let held = [measured(&s, &truth, 6, 4)];
        let start = Costs::this_vm();
        let before = loss(&s, &fit_cases, &start).expect("loss");
        let mut steps = 0;
        let (fitted, after) = fit(&s, &fit_cases, start, 6, &mut |_| steps += 1).expect("fits");
        assert!(after < before / 4.0, "loss {before} -> {after}");
        assert!(steps > 1);
        let held_before = loss(&s, &held, &start).expect("loss");
        let held_after = loss(&s, &held, &fitted).expect("loss");
        assert!(held_after < held_before, "held out: {held_before} -> {held_after}");
        let (text, worst) = table(&s, &fit_cases, &held, &fitted).expect("table");
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.contains("held out") && worst.is_finite(), "{text}");
    }
}
