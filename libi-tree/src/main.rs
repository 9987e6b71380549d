//! `libi-tree`: compare launch-tree shapes under the launch model, and print a tree.
//!
//! ```text
//! libi-tree plan --nodes N [--seq S --rem R] [--slots C] [--batch B] [--cores C --cpu W]
//!                [--hold] [--format table|json]
//! libi-tree show --nodes N --tree SHAPE [--seq S --rem R] [--slots C] [--batch B]
//!                [--cores C --cpu W] [--hold] [--format text|dot]
//! libi-tree calibrate FILE.json... [--cores fit|off|C] [--hold yes|no] [--format table|json]
//! libi-tree plot FILE.json [-o OUT.svg] [--seq S --rem R] [--sort time|node] [--format svg]
//! ```
//!
//! `N` counts every node of the tree, the root (the front end) included. `FILE.json` is a
//! launch report of `libi-mpiexec --report`. Bad input gets a one-line error on stderr and
//! exit status 2.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use libi::report::Report;
use libi::tree::{evaluate, rank_shapes, LaunchModel, Shape, Tree};
use libi_tree::calibrate::{calibrate, compare, fit_model, Cores, Fit, ModelFit, NodeTimes, Run};
use serde::Serialize;

/// Largest `--nodes` accepted (keeps a typo from allocating gigabytes).
const MAX_NODES: usize = 100_000_000;

#[derive(Parser, Debug)]
#[command(
    name = "libi-tree",
    version,
    about = "Launch trees under the launch model: rank shapes (plan), print one (show), fit \
             SEQ and REM to a launch report (calibrate), plot measured against modeled (plot)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Rank every shape (greedy, flat, chain, binomial, kary:2..512) by modeled launch time.
    Plan(PlanArgs),
    /// Print one tree with the modeled launch time of every node.
    Show(ShowArgs),
    /// Fit the launch model (SEQ, REM and, on shared cores, C and W) to launch reports
    /// (libi-mpiexec --report): least squares on measured against modeled connect times.
    Calibrate(CalibrateArgs),
    /// Draw measured against modeled launch time of every NLA of a report, as SVG.
    Plot(PlotArgs),
}

#[derive(Args, Debug)]
struct CalibrateArgs {
    /// Launch reports (libi-mpiexec --report FILE.json), any shapes and sizes: one model is
    /// fitted to every launched node of all of them
    #[arg(value_name = "FILE.json", required = true)]
    files: Vec<PathBuf>,
    /// Shared cores: fit (fit how many), off (the base model) or a number
    #[arg(long, default_value = "fit", value_name = "fit|off|C")]
    cores: String,
    /// Model the driver's held setups (a child's setup waits for its parent's launches):
    /// yes or no
    #[arg(long, default_value = "yes", value_name = "yes|no")]
    hold: String,
    /// Fit the CPU the parent's loop spends on each child's hello: yes or no
    #[arg(long, default_value = "yes", value_name = "yes|no")]
    accept: String,
    /// Output format: table or json
    #[arg(long, default_value = "table")]
    format: String,
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// Launch report (libi-mpiexec --report FILE.json)
    #[arg(value_name = "FILE.json")]
    file: PathBuf,
    /// Where to write the plot (`-` or absent: standard output)
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    output: Option<PathBuf>,
    /// SEQ for the model [default: the fit, else the report's]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    seq: Option<String>,
    /// REM for the model [default: the fit, else the report's]
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    rem: Option<String>,
    /// Order of the NLAs along the x axis: time (measured launch time) or node (node id)
    #[arg(long, default_value = "time")]
    sort: String,
    /// Output format: svg
    #[arg(long, default_value = "svg")]
    format: String,
}

#[derive(Args, Debug)]
struct ModelArgs {
    /// SEQ: seconds between two launches by one parent [default: 0.007]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    seq: Option<String>,
    /// REM: seconds from starting a child's launch until it can launch its own [default: 0.3]
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    rem: Option<String>,
    /// Concurrent launch lanes per parent (each launch holds a lane for SEQ)
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    slots: Option<String>,
    /// Launch children in batches of B, waiting for each batch to connect back
    #[arg(long, value_name = "B", allow_negative_numbers = true)]
    batch: Option<String>,
    /// Cores shared by every launch (processor sharing; 0: none, the default)
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    cores: Option<String>,
    /// Of REM, the CPU seconds a remote start does on the shared cores [default: REM]
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    cpu: Option<String>,
    /// A child's setup waits until its parent's launches are out (as the NLA driver does)
    #[arg(long)]
    hold: bool,
    /// CPU seconds the parent's loop spends on each child's hello, one at a time [default: 0]
    #[arg(long, value_name = "A", allow_negative_numbers = true)]
    accept: Option<String>,
}

#[derive(Args, Debug)]
struct PlanArgs {
    /// Number of tree nodes, the root (front end) included
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    nodes: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Output format: table or json
    #[arg(long, default_value = "table")]
    format: String,
}

#[derive(Args, Debug)]
struct ShowArgs {
    /// Number of tree nodes, the root (front end) included
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    nodes: String,
    /// Shape: greedy, kary:K, binomial, flat or chain
    #[arg(long, value_name = "SHAPE")]
    tree: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Output format: text or dot
    #[arg(long, default_value = "text")]
    format: String,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    eprintln!("libi-tree: error: missing subcommand: plan, show, calibrate or plot (see --help)");
                    ExitCode::from(2)
                }
                _ => {
                    eprintln!("libi-tree: {}", one_line(&e.render().to_string()));
                    ExitCode::from(2)
                }
            };
        }
    };
    let out = match cli.cmd {
        Cmd::Plan(a) => plan(&a),
        Cmd::Show(a) => show(&a),
        Cmd::Calibrate(a) => calibrate_cmd(&a),
        Cmd::Plot(a) => plot(&a),
    };
    match out {
        Ok(text) => {
            let mut w = BufWriter::new(io::stdout().lock());
            match w.write_all(text.as_bytes()).and_then(|()| w.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("libi-tree: error: writing output: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(msg) => {
            eprintln!("libi-tree: error: {msg}");
            ExitCode::from(2)
        }
    }
}

/// clap's message on one line: the `error:` line, plus the indented list under it if it
/// ends with a colon ("the following required arguments were not provided:").
fn one_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or("error: bad arguments").to_string();
    if out.ends_with(':') {
        let list: Vec<&str> = lines.take_while(|l| !l.starts_with("Usage:")).collect();
        out.push(' ');
        out.push_str(&list.join(", "));
    }
    out
}

fn parse_nodes(s: &str) -> Result<usize, String> {
    let n: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("--nodes must be a whole number, got '{}'", s.escape_debug()))?;
    if n < 1 {
        return Err(format!("--nodes must be at least 1, got {n}"));
    }
    if n > MAX_NODES as i128 {
        return Err(format!("--nodes must be at most {MAX_NODES}, got {n}"));
    }
    Ok(n as usize)
}

fn parse_time(flag: &str, s: Option<&str>, default: f64) -> Result<f64, String> {
    let Some(s) = s else { return Ok(default) };
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{flag} must be a number of seconds, got '{}'", s.escape_debug()))?;
    if !v.is_finite() {
        return Err(format!("{flag} must be finite, got {v}"));
    }
    if v < 0.0 {
        return Err(format!("{flag} must not be negative, got {v}"));
    }
    Ok(v)
}

fn parse_count(flag: &str, s: &str) -> Result<u32, String> {
    let v: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("{flag} must be a whole number, got '{}'", s.escape_debug()))?;
    if v < 1 {
        return Err(format!("{flag} must be at least 1, got {v}"));
    }
    u32::try_from(v).map_err(|_| format!("{flag} is too large, got {v}"))
}

fn parse_model(a: &ModelArgs) -> Result<LaunchModel, String> {
    let d = LaunchModel::DEFAULT;
    let seq = parse_time("--seq", a.seq.as_deref(), d.seq)?;
    let rem = parse_time("--rem", a.rem.as_deref(), d.rem)?;
    let slots = match &a.slots {
        Some(s) => parse_count("--slots", s)?,
        None => 1,
    };
    let batch = match &a.batch {
        Some(s) => Some(parse_count("--batch", s)?),
        None => None,
    };
    let cores = parse_time("--cores", a.cores.as_deref(), 0.0)?;
    let cpu = parse_time("--cpu", a.cpu.as_deref(), rem)?;
    let m = LaunchModel::new(seq, rem)
        .with_slots(slots)
        .with_batch(batch)
        .with_shared(cores, cpu)
        .with_hold(a.hold)
        .with_accept(parse_time("--accept", a.accept.as_deref(), 0.0)?);
    m.validate().map_err(|e| e.to_string())?;
    Ok(m)
}

fn describe(m: &LaunchModel) -> String {
    let slots = match m.slots {
        1 => "1 launch lane".to_string(),
        c => format!("{c} launch lanes"),
    };
    let batch = match m.batch {
        Some(b) => format!("batches of {b}"),
        None => "no batching".to_string(),
    };
    let mut s = format!("SEQ {} s, REM {} s, {slots}, {batch}", m.seq, m.rem);
    if m.is_shared() {
        s.push_str(&format!(", {} shared cores, {} s CPU per remote start", m.cores, m.cpu));
    }
    if m.hold {
        s.push_str(", setups held");
    }
    if m.accept > 0.0 {
        s.push_str(&format!(", {} s per hello", m.accept));
    }
    s
}

#[derive(Serialize)]
struct PlanJson {
    nodes: usize,
    seq: f64,
    rem: f64,
    shapes: Vec<libi::tree::ShapeCost>,
}

fn plan(a: &PlanArgs) -> Result<String, String> {
    let n = parse_nodes(&a.nodes)?;
    let model = parse_model(&a.model)?;
    let json = match a.format.as_str() {
        "table" => false,
        "json" => true,
        other => {
            return Err(format!(
                "unknown --format '{}' for plan (expected table or json)",
                other.escape_debug()
            ))
        }
    };
    let ranked = rank_shapes(n, &model);
    if json {
        let doc = PlanJson { nodes: n, seq: model.seq, rem: model.rem, shapes: ranked };
        let mut s = serde_json::to_string(&doc).map_err(|e| format!("encoding JSON: {e}"))?;
        s.push('\n');
        return Ok(s);
    }
    let noun = if n == 1 { "node" } else { "nodes" };
    let mut s = format!("# {n} {noun}; {}\n", describe(&model));
    s.push_str(&format!(
        "{:>4}  {:<10} {:>12} {:>7} {:>10}\n",
        "rank", "shape", "time (s)", "depth", "max_fanout"
    ));
    for (i, r) in ranked.iter().enumerate() {
        s.push_str(&format!(
            "{:>4}  {:<10} {:>12.6} {:>7} {:>10}\n",
            i + 1,
            r.shape,
            r.time,
            r.depth,
            r.max_fanout
        ));
    }
    Ok(s)
}

fn show(a: &ShowArgs) -> Result<String, String> {
    let n = parse_nodes(&a.nodes)?;
    let shape: Shape = a.tree.parse().map_err(|e: libi::tree::ShapeError| e.to_string())?;
    let model = parse_model(&a.model)?;
    let dot = match a.format.as_str() {
        "text" => false,
        "dot" => true,
        other => {
            return Err(format!(
                "unknown --format '{}' for show (expected text or dot)",
                other.escape_debug()
            ))
        }
    };
    let tree = Tree::build(&shape, n, &model);
    let eval = evaluate(&tree, &model);
    let head = format!(
        "{shape}, {n} nodes, depth {}, max fanout {}, modeled launch time {:.6} s; {}",
        tree.depth(),
        tree.max_fanout(),
        eval.total,
        describe(&model)
    );
    let mut s = String::new();
    if dot {
        s.push_str("digraph launch_tree {\n");
        s.push_str(&format!("  // {head}\n"));
        s.push_str("  node [shape=box];\n");
        for v in 0..n {
            s.push_str(&format!("  {v} [label=\"{v}\\n{:.6} s\"];\n", eval.times[v]));
        }
        for v in 0..n {
            for &c in tree.children(v) {
                s.push_str(&format!("  {v} -> {c};\n"));
            }
        }
        s.push_str("}\n");
    } else {
        s.push_str(&format!("# {head}\n"));
        let depths = tree.depths();
        for v in tree.subtree(0) {
            s.push_str(&format!(
                "{:indent$}{v}  t={:.6}\n",
                "",
                eval.times[v],
                indent = 2 * depths[v]
            ));
        }
    }
    Ok(s)
}

/// A path for a one-line message.
fn shown(p: &std::path::Path) -> String {
    p.display().to_string().escape_debug().to_string()
}

/// Reads and parses a launch report; every error names the file, on one line.
fn load_report(path: &std::path::Path) -> Result<Report, String> {
    let name = shown(path);
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let report: Report = serde_json::from_str(&text)
        .map_err(|e| format!("{name}: not a launch report: {}", one_line(&e.to_string())))?;
    if report.reports.iter().all(|r| r.launches.is_empty()) {
        return Err(format!("{name}: the report has no launch records"));
    }
    Ok(report)
}

/// Seconds for a table: 4 decimals, more for small values so two significant digits show.
fn secs(v: f64) -> String {
    let a = v.abs();
    let decimals = if a < 1e-9 || !a.is_finite() || a >= 0.001 {
        4
    } else {
        (1 - a.log10().floor() as i32).clamp(4, 10) as usize
    };
    format!("{v:.decimals$}")
}

/// One run of `calibrate --format json`: its summary and every node's pair.
#[derive(Serialize)]
struct RunJson {
    file: String,
    tree: String,
    nodes: u32,
    /// Measured and modeled launch time of the whole run (the last connect).
    measured: f64,
    modeled: f64,
    /// `[measured, modeled]` connect time of every NLA.
    points: Vec<[f64; 2]>,
}

#[derive(Serialize)]
struct CalibrateJson {
    #[serde(flatten)]
    fit: ModelFit,
    /// The per-launch line fit of the first report (`connected − ready(parent)` against
    /// `order − 1`), as earlier versions printed it.
    line: Fit,
    /// R² over every sample of the model with the line fit's constants.
    line_r2: f64,
    per_run: Vec<RunJson>,
}

fn calibrate_cmd(a: &CalibrateArgs) -> Result<String, String> {
    let json = match a.format.as_str() {
        "table" => false,
        "json" => true,
        other => {
            return Err(format!(
                "unknown --format '{}' for calibrate (expected table or json)",
                other.escape_debug()
            ))
        }
    };
    let cores = match a.cores.as_str() {
        "fit" => Cores::Fit,
        "off" | "0" => Cores::Off,
        other => match other.parse::<f64>() {
            Ok(c) if c.is_finite() && c > 0.0 => Cores::Fixed(c),
            _ => {
                return Err(format!(
                    "--cores must be fit, off or a positive number, got '{}'",
                    other.escape_debug()
                ))
            }
        },
    };
    let hold = match a.hold.as_str() {
        "yes" => true,
        "no" => false,
        other => return Err(format!("--hold must be yes or no, got '{}'", other.escape_debug())),
    };
    let accept = match a.accept.as_str() {
        "yes" => true,
        "no" => false,
        other => return Err(format!("--accept must be yes or no, got '{}'", other.escape_debug())),
    };
    let mut runs = Vec::new();
    let mut line = None;
    for f in &a.files {
        let report = load_report(f)?;
        if line.is_none() {
            line = Some(calibrate(&report).map_err(|e| format!("{}: {e}", shown(f)))?);
        }
        runs.push(Run::new(&report).map_err(|e| format!("{}: {e}", shown(f)))?);
    }
    let Some(line) = line else {
        return Err("no launch reports given".to_string());
    };
    let fit = fit_model(&runs, cores, hold, accept).map_err(|e| e.to_string())?;
    let model = fit.model();
    let line_model = line.model(0.0);
    let (line_r2, _, _) = libi_tree::calibrate::goodness(&runs, &line_model);
    let per_run: Vec<RunJson> = runs
        .iter()
        .zip(&a.files)
        .map(|(r, f)| {
            let times = r.times(&model);
            let modeled = times.iter().map(|t| t.modeled).fold(0.0, f64::max);
            RunJson {
                file: f.display().to_string(),
                tree: r.tree.clone(),
                nodes: r.nodes,
                measured: r.measured_total(),
                modeled,
                points: times.iter().map(|t| [t.measured, t.modeled]).collect(),
            }
        })
        .collect();
    if json {
        let doc = CalibrateJson { fit, line, line_r2, per_run };
        let mut s = serde_json::to_string(&doc).map_err(|e| format!("encoding JSON: {e}"))?;
        s.push('\n');
        return Ok(s);
    }
    let mut s = model_table(&fit);
    if runs.len() == 1 {
        if let Some(note) = &line.note {
            s.push_str(note);
            s.push('\n');
        }
    } else {
        s.push_str(&format!(
            "{:<10} {:>6} {:>14} {:>13}\n",
            "tree", "NLAs", "measured (s)", "modeled (s)"
        ));
        for r in &per_run {
            s.push_str(&format!(
                "{:<10} {:>6} {:>14} {:>13}\n",
                r.tree,
                r.nodes,
                secs(r.measured),
                secs(r.modeled)
            ));
        }
    }
    Ok(s)
}

/// The fit in a few lines: the model and its R², then (on shared cores) the base model's.
fn model_table(fit: &ModelFit) -> String {
    let noun = if fit.samples == 1 { "launch" } else { "launches" };
    let runs = if fit.runs == 1 { "1 run".to_string() } else { format!("{} runs", fit.runs) };
    let mut s = format!(
        "SEQ {} s  REM {} s  R² {:.4}  RMS {} s  (n = {} {noun}, {runs})\n",
        secs(fit.seq),
        secs(fit.rem),
        fit.r2,
        secs(fit.rms),
        fit.samples
    );
    if fit.cores > 0.0 || fit.hold || fit.accept > 0.0 {
        let shared = if fit.cores > 0.0 {
            format!("shared cores {:.2}, CPU per remote start {} s", fit.cores, secs(fit.cpu))
        } else {
            "no shared cores".to_string()
        };
        let mut hold = if fit.hold { ", setups held".to_string() } else { String::new() };
        if fit.accept > 0.0 {
            hold.push_str(&format!(", {} s per hello", secs(fit.accept)));
        }
        s.push_str(&format!(
            "{shared}{hold}; the paper's model: SEQ {} s  REM {} s  R² {:.4}\n",
            secs(fit.base_seq),
            secs(fit.base_rem),
            fit.base_r2
        ));
    }
    s
}

/// Where a model constant of `plot` came from.
fn pick(
    flag: &str,
    given: Option<&str>,
    fitted: Option<f64>,
    own: f64,
) -> Result<(f64, &'static str), String> {
    if given.is_some() {
        return Ok((parse_time(flag, given, 0.0)?, "given"));
    }
    match fitted {
        Some(v) => Ok((v, "fit")),
        None => Ok((own, "report")),
    }
}

fn plot(a: &PlotArgs) -> Result<String, String> {
    if a.format != "svg" {
        return Err(format!(
            "unknown --format '{}' for plot (expected svg)",
            a.format.escape_debug()
        ));
    }
    let by_node = match a.sort.as_str() {
        "time" => false,
        "node" => true,
        other => {
            return Err(format!(
                "unknown --sort '{}' (expected time or node)",
                other.escape_debug()
            ))
        }
    };
    // Validate the flags before reading the file.
    parse_time("--seq", a.seq.as_deref(), 0.0)?;
    parse_time("--rem", a.rem.as_deref(), 0.0)?;
    let name = shown(&a.file);
    let report = load_report(&a.file)?;
    let fit = if a.seq.is_some() && a.rem.is_some() {
        None
    } else {
        Some(calibrate(&report).map_err(|e| format!("{name}: {e}"))?)
    };
    let (seq, seq_from) =
        pick("--seq", a.seq.as_deref(), fit.as_ref().and_then(|f| f.seq), report.seq)?;
    let (rem, rem_from) = pick("--rem", a.rem.as_deref(), fit.as_ref().map(|f| f.rem), report.rem)?;
    let model = LaunchModel::new(seq, rem);
    let mut times = compare(&report, &model).map_err(|e| format!("{name}: {e}"))?;
    if by_node {
        times.sort_by_key(|t| t.node);
    } else {
        times.sort_by(|x, y| x.measured.total_cmp(&y.measured).then(x.node.cmp(&y.node)));
    }
    let model_line =
        format!("model: SEQ {} s ({seq_from}), REM {} s ({rem_from})", secs(seq), secs(rem));
    let svg = svg_plot(&report.tree, &times, by_node, &model_line);
    match &a.output {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, &svg).map_err(|e| format!("cannot write {}: {e}", shown(p)))?;
            let worst = times.iter().map(|t| t.measured).fold(f64::NAN, f64::max);
            let modeled = times.iter().map(|t| t.modeled).fold(f64::NAN, f64::max);
            Ok(format!(
                "wrote {}: {} NLAs, measured launch time {} s, modeled {} s; {model_line}\n",
                shown(p),
                times.len(),
                secs(worst),
                secs(modeled)
            ))
        }
        _ => Ok(svg),
    }
}

/// Text for SVG character data and attribute values.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks on `span`.
fn nice_step(span: f64, target: f64) -> f64 {
    let raw = (span / target).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Tick label: as many decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 9.0) as usize;
    let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
    format!("{v:.decimals$}")
}

/// The SVG: one point per NLA, measured (connected) and modeled launch time.
fn svg_plot(tree: &str, times: &[NodeTimes], by_node: bool, model_line: &str) -> String {
    const W: f64 = 960.0;
    const H: f64 = 540.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 70.0;
    const BOTTOM: f64 = 60.0;
    const MEASURED: &str = "#1f77b4";
    const MODELED: &str = "#d62728";
    let n = times.len();
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let values = times.iter().flat_map(|t| [t.measured, t.modeled]);
    let lo = values.clone().fold(0.0f64, f64::min);
    let hi = values.fold(0.0f64, f64::max);
    let ystep = nice_step(if hi > lo { hi - lo } else { 1.0 }, 6.0);
    let ymin = (lo / ystep).floor() * ystep;
    // Keep the highest point off the frame.
    let ymax = (((hi + 0.03 * (hi - lo)) / ystep).ceil() * ystep).max(ymin + ystep);
    let px = |i: usize| LEFT + (i as f64 + 0.5) * pw / n.max(1) as f64;
    let py = |v: f64| TOP + ph - (v - ymin) / (ymax - ymin) * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let noun = if n == 1 { "NLA" } else { "NLAs" };
    let title = format!(
        "Launch times: {} tree, {n} {noun}",
        if tree.is_empty() { "unknown" } else { tree }
    );
    let _ = writeln!(s, "<title>{}</title>", xml_escape(&title));
    let _ = writeln!(s, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" \
         font-weight=\"bold\">{}</text>",
        W / 2.0,
        xml_escape(&title)
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"46\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
        W / 2.0,
        xml_escape(model_line)
    );

    // Grid and y ticks.
    let _ = writeln!(s, "<g class=\"axes\" stroke=\"#ccc\" stroke-width=\"1\">");
    let ticks = ((ymax - ymin) / ystep).round() as i64;
    for k in 0..=ticks {
        let v = ymin + k as f64 * ystep;
        let y = py(v);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.2}\" x2=\"{:.2}\" y2=\"{y:.2}\"/>",
            LEFT + pw
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\" stroke=\"none\" \
             fill=\"black\">{}</text>",
            LEFT - 6.0,
            y + 4.0,
            tick_label(v, ystep)
        );
    }
    // x ticks: positions 1..=n.
    let xstep = nice_step(n as f64, 10.0).max(1.0) as usize;
    let mut xt: Vec<usize> = (1..=n).filter(|i| i.rem_euclid(xstep) == 0).collect();
    if xt.first() != Some(&1) {
        xt.insert(0, 1);
    }
    for i in xt {
        let x = px(i - 1);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.2}\" y1=\"{:.2}\" x2=\"{x:.2}\" y2=\"{:.2}\" stroke=\"black\"/>",
            TOP + ph,
            TOP + ph + 5.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{x:.2}\" y=\"{:.2}\" text-anchor=\"middle\" stroke=\"none\" \
             fill=\"black\">{i}</text>",
            TOP + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" \
         stroke=\"black\"/>"
    );
    let _ = writeln!(s, "</g>");
    let xlabel =
        if by_node { "NLAs in order of node id" } else { "NLAs in order of measured launch time" };
    let _ = writeln!(
        s,
        "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{xlabel}</text>",
        LEFT + pw / 2.0,
        H - 16.0
    );
    let _ = writeln!(
        s,
        "<text x=\"18\" y=\"{:.2}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 18 {:.2})\">launch time (s since start)</text>",
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );

    // The two series.
    let markers = n <= 2000;
    for (class, color, dash, pick) in [
        (
            "modeled",
            MODELED,
            " stroke-dasharray=\"6 3\"",
            (|t: &NodeTimes| t.modeled) as fn(&NodeTimes) -> f64,
        ),
        ("measured", MEASURED, "", |t: &NodeTimes| t.measured),
    ] {
        let _ = writeln!(s, "<g class=\"{class}\">");
        let pts: Vec<String> = times
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{:.2},{:.2}", px(i), py(pick(t))))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"{dash} \
             points=\"{}\"/>",
            pts.join(" ")
        );
        if markers {
            for (i, t) in times.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{:.2}\" cy=\"{:.2}\" r=\"2.5\" fill=\"{color}\">\
                     <title>node {} ({}): {class} {:.6} s</title></circle>",
                    px(i),
                    py(pick(t)),
                    t.node,
                    xml_escape(&t.host),
                    pick(t)
                );
            }
        }
        let _ = writeln!(s, "</g>");
    }

    // Legend, top left inside the plot.
    let (lx, ly) = (LEFT + 12.0, TOP + 12.0);
    let _ = writeln!(s, "<g class=\"legend\">");
    let _ = writeln!(
        s,
        "<rect x=\"{lx}\" y=\"{ly}\" width=\"190\" height=\"46\" fill=\"white\" \
         fill-opacity=\"0.85\" stroke=\"#999\"/>"
    );
    for (k, (label, color, dash)) in
        [("measured (connected)", MEASURED, ""), ("modeled", MODELED, " stroke-dasharray=\"6 3\"")]
            .into_iter()
            .enumerate()
    {
        let y = ly + 15.0 + 16.0 * k as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{:.2}\" y1=\"{y:.2}\" x2=\"{:.2}\" y2=\"{y:.2}\" stroke=\"{color}\" \
             stroke-width=\"1.5\"{dash}/>",
            lx + 8.0,
            lx + 36.0
        );
        let _ = writeln!(
            s,
            "<circle cx=\"{:.2}\" cy=\"{y:.2}\" r=\"2.5\" fill=\"{color}\"/>",
            lx + 22.0
        );
        let _ = writeln!(s, "<text x=\"{:.2}\" y=\"{:.2}\">{label}</text>", lx + 44.0, y + 4.0);
    }
    let _ = writeln!(s, "</g>");
    s.push_str("</svg>\n");
    s
}
