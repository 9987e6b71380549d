//! `libi-sim`: run the real node cores of libi in virtual time.
//!
//! ```text
//! libi-sim --nodes 100000 --ppn 16 --workload mpich-init --tree greedy
//! libi-sim --nodes 1000,10000,100000 --tree greedy,kary:16,binomial,flat \
//!          --kvs-push-max 0,64K --batch none,64 --json out.json --svg launch.svg
//! libi-sim --nodes 64 --ppn 4 --fault kill:5@0.02
//! ```
//!
//! Lists (comma-separated) in `--nodes`, `--ppn`, `--tree`, `--kvs-push-max` and `--batch`
//! make a sweep: every combination is run, one table row each.

use clap::Parser;
use libi::tree::Shape;
use libi_sim::model::Costs;
use libi_sim::report::{details, svg, table, Row};
use libi_sim::workload::Trace;
use libi_sim::{Cluster, Config, Fault};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "libi-sim",
    version,
    about = "Simulate a libi job: the real node cores, in virtual time"
)]
struct Args {
    /// Agents (nodes with ranks); a comma-separated list runs each
    #[arg(long, default_value = "64")]
    nodes: String,
    /// Ranks per agent (list allowed)
    #[arg(long, default_value = "16")]
    ppn: String,
    /// Tree shapes: greedy, kary:K, binomial, flat, chain (list allowed)
    #[arg(long, default_value = "greedy")]
    tree: String,
    /// Workload: mpich-init, mpich5-init, exchange, fence, pmi2, pmgr, spawn, or a .pmitrace
    /// file
    #[arg(long, default_value = "mpich-init")]
    workload: String,
    /// Leave out the workload's `>slice` gets (MPICH 4's allgather of business cards: every
    /// node fetches every card, nodes x ranks gets; beyond a few thousand nodes no launcher
    /// can serve it, see bench/results.md)
    #[arg(long = "skip-slice")]
    skip_slice: bool,
    /// Fences pushing at most this many bytes of pairs down (0: every get climbs); list allowed
    #[arg(long = "kvs-push-max", default_value = "16M")]
    push_max: String,
    /// Launch children in batches of B ("none" for no batching); list allowed
    #[arg(long, default_value = "none")]
    batch: String,
    /// Cost model preset: fork (an agent per machine, fork-launcher figures), vm (every agent
    /// on this 2-core VM: the validated figures), ssh (LAN, the launch model's defaults)
    #[arg(long, default_value = "fork")]
    costs: String,
    /// Override one cost: NAME=VALUE (seq, rem, slots, latency, bandwidth, cpu_msg,
    /// cpu_byte, cpu_pmi, cpu_send, loop_launch, fork, rank_start, rank_step, pmi_latency, rank_exit,
    /// kill_delay, cores, fe_start, jitter)
    #[arg(long = "cost", value_name = "NAME=VALUE")]
    cost: Vec<String>,
    /// Plan the tree for this launch model "SEQ,REM" (as libi-mpiexec's --launch-model;
    /// "default" for its default 0.007,0.3) instead of the simulated costs
    #[arg(long = "plan-model", value_name = "SEQ,REM")]
    plan_model: Option<String>,
    /// Inject a fault: kill:NODE@T, drop:NODE@T, slow:NODE:FACTOR, never:NODE
    #[arg(long = "fault")]
    faults: Vec<String>,
    /// Launch timeout (virtual seconds)
    #[arg(long = "launch-timeout", default_value_t = 60.0)]
    launch_timeout: f64,
    /// Random seed (jitter)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write every run as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Write an SVG plot of launch time against nodes (per tree, with the model) to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
    /// Print per-level traffic and the job's message for each run
    #[arg(short, long)]
    verbose: bool,
}

fn list<T>(s: &str, what: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',').map(|x| f(x.trim()).map_err(|e| format!("--{what} '{x}': {e}"))).collect()
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("libi-sim: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(a: &Args) -> Result<u8, String> {
    let nodes = list(&a.nodes, "nodes", |x| {
        x.parse::<usize>()
            .ok()
            .filter(|n| (1..=10_000_000).contains(n))
            .ok_or("not a node count".into())
    })?;
    let ppns = list(&a.ppn, "ppn", |x| {
        x.parse::<u32>().ok().filter(|n| (1..=4096).contains(n)).ok_or("not a rank count".into())
    })?;
    let shapes = list(&a.tree, "tree", |x| x.parse::<Shape>())?;
    let pushes = list(&a.push_max, "kvs-push-max", libi::job::parse_bytes)?;
    let batches = list(&a.batch, "batch", |x| match x {
        "none" | "0" => Ok(None),
        b => b.parse::<u32>().map(Some).map_err(|_| "not a batch size".into()),
    })?;
    let mut costs = match a.costs.as_str() {
        "fork" => Costs::default(),
        "ssh" => Costs::ssh_lan(),
        "vm" => Costs::this_vm(),
        c => return Err(format!("--costs '{c}': expected fork, vm or ssh")),
    };
    for c in &a.cost {
        let (k, v) =
            c.split_once('=').ok_or_else(|| format!("--cost '{c}': expected NAME=VALUE"))?;
        costs.set(k, v)?;
    }
    let plan_model = match a.plan_model.as_deref() {
        None => None,
        Some("default") => Some(libi::tree::LaunchModel::DEFAULT),
        Some(m) => {
            let (s, r) =
                m.split_once(',').ok_or_else(|| format!("--plan-model '{m}': expected SEQ,REM"))?;
            let num = |x: &str| {
                x.trim().parse::<f64>().map_err(|_| format!("--plan-model '{m}': not a number"))
            };
            let model = libi::tree::LaunchModel::new(num(s)?, num(r)?);
            model.validate()?;
            Some(model)
        }
    };
    let faults = a.faults.iter().map(|f| f.parse::<Fault>()).collect::<Result<Vec<_>, _>>()?;
    if !(a.launch_timeout.is_finite() && a.launch_timeout > 0.0) {
        return Err("--launch-timeout must be a positive number of seconds".into());
    }
    let mut trace = Trace::load(&a.workload)?;
    if a.skip_slice {
        trace = trace.without_slices();
    }
    let mut rows = Vec::new();
    let mut worst = 0u8;
    let mut runs_left = nodes.len() * ppns.len() * shapes.len() * pushes.len() * batches.len();
    for &n in &nodes {
        for &ppn in &ppns {
            for shape in &shapes {
                for &push in &pushes {
                    for &batch in &batches {
                        let mut cfg = Config::new(n, ppn, trace.clone());
                        cfg.shape = shape.clone();
                        cfg.costs = costs;
                        cfg.batch = batch;
                        cfg.push_max = push;
                        cfg.launch_timeout = a.launch_timeout;
                        cfg.faults = faults.clone();
                        cfg.seed = a.seed;
                        cfg.plan_model = plan_model;
                        let t0 = Instant::now();
                        let cluster = Cluster::new(cfg)?;
                        runs_left -= 1;
                        let outcome =
                            if runs_left == 0 { cluster.run_then_exit() } else { cluster.run() };
                        let wall = t0.elapsed().as_secs_f64();
                        let rss_mib = libi::report::peak_rss_kib() as f64 / 1024.0;
                        if a.verbose {
                            eprint!("{}", details(&outcome));
                        }
                        if outcome.status != 0 {
                            worst = 1;
                        }
                        rows.push(Row { outcome, push_max: push, batch, wall, rss_mib });
                    }
                }
            }
        }
    }
    print!("{}", table(&rows));
    if rows.len() == 1 {
        let o = &rows[0].outcome;
        if let Some(m) = &o.message {
            println!("job: status {}: {m}", o.status);
        }
    }
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    if let Some(path) = &a.svg {
        let title = format!("libi-sim: launch of {} ranks/agent ({} costs)", a.ppn, a.costs);
        std::fs::write(path, svg(&rows, &title))
            .map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    Ok(worst)
}

/// Tens of millions of small allocations come and go (PMI lines, answers, tree messages):
/// mimalloc's thread-local free lists take a third less time than glibc's here. (Feature
/// `system-alloc` keeps the system's, for heap profilers such as heaptrack.)
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
