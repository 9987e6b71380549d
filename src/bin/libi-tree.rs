//! `libi-tree`: compare launch-tree shapes under the launch model, and print a tree.
//!
//! ```text
//! libi-tree plan --nodes N [--seq S --rem R] [--slots C] [--batch B] [--format table|json]
//! libi-tree show --nodes N --tree SHAPE [--seq S --rem R] [--slots C] [--batch B]
//!                [--format text|dot]
//! ```
//!
//! `N` counts every node of the tree, the root (the front end) included. Bad input gets a
//! one-line error on stderr and exit status 2.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use libi::tree::{evaluate, rank_shapes, LaunchModel, Shape, Tree};
use serde::Serialize;

/// Largest `--nodes` accepted (keeps a typo from allocating gigabytes).
const MAX_NODES: usize = 100_000_000;

#[derive(Parser, Debug)]
#[command(
    name = "libi-tree",
    version,
    about = "Launch trees under the launch model: rank shapes (plan) or print one (show)"
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
                    eprintln!("libi-tree: error: missing subcommand: plan or show (see --help)");
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
    let v: f64 = s.trim().parse().map_err(|_| {
        format!(
            "{flag} must be a number of seconds, got '{}'",
            s.escape_debug()
        )
    })?;
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
    Ok(LaunchModel::new(seq, rem)
        .with_slots(slots)
        .with_batch(batch))
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
    format!("SEQ {} s, REM {} s, {slots}, {batch}", m.seq, m.rem)
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
        let doc = PlanJson {
            nodes: n,
            seq: model.seq,
            rem: model.rem,
            shapes: ranked,
        };
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
    let shape: Shape = a.tree.parse()?;
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
            s.push_str(&format!(
                "  {v} [label=\"{v}\\n{:.6} s\"];\n",
                eval.times[v]
            ));
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
