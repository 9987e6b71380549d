//! `libi-sim`: run the real node cores of libi in virtual time.
//!
//! ```text
//! libi-sim --nodes 100000 --ppn 16 --workload mpich-init --tree greedy
//! libi-sim --nodes 1000,10000,100000 --tree greedy,kary:16,binomial,flat \
//!          --kvs-push-max 0,64K --batch none,64 --json out.json --svg launch.svg
//! libi-sim --nodes 64 --ppn 4 --fault kill:5@0.02
//! libi-sim --nodes 1000 --ppn 16 --workload ompi5-init -v
//! ```
//!
//! Lists (comma-separated) in `--nodes`, `--ppn`, `--tree`, `--kvs-push-max` and `--batch`
//! make a sweep: every combination is run, one table row each.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use libi::tree::Shape;
use libi_sim::memory;
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
    about = "Simulate a libi job: the real node cores, in virtual time",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: Args,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Run small real jobs here (libi-mpiexec, fork launcher, the PMI replay client), fit
    /// the cost model to them, write a cost file for --costs FILE, and check the fit on
    /// larger real jobs it did not see
    Calibrate(CalArgs),
}

#[derive(clap::Args, Debug)]
struct CalArgs {
    /// The libi-mpiexec to run [default: the one next to libi-sim]
    #[arg(long, value_name = "PATH")]
    mpiexec: Option<String>,
    /// The PMI replay client (tests/programs/pmi_replay.c) [default: built here with $CC or
    /// cc]
    #[arg(long, value_name = "PATH")]
    replay: Option<String>,
    /// Agents of the cases fitted (list)
    #[arg(long = "fit-agents", default_value = "4,16")]
    fit_agents: String,
    /// Ranks per agent of the cases fitted (list)
    #[arg(long = "fit-ppn", default_value = "1,4,16")]
    fit_ppn: String,
    /// Agents of the held-out cases, which the fit does not see (list; "none": no check)
    #[arg(long = "check-agents", default_value = "64")]
    check_agents: String,
    /// Ranks per agent of the held-out cases (list)
    #[arg(long = "check-ppn", default_value = "1,4,16")]
    check_ppn: String,
    /// Real runs per case (the median is kept)
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Workload of the real runs and the simulation (built-in name or .pmitrace file)
    #[arg(long, default_value = "mpich-init")]
    workload: String,
    /// Tree shape of the real runs and the simulation
    #[arg(long, default_value = "greedy")]
    tree: String,
    /// --kvs-push-max of the real runs and the simulation
    #[arg(long = "kvs-push-max", default_value = "16M")]
    push_max: String,
    /// The cost file to write
    #[arg(short, long, value_name = "FILE", default_value = "libi-sim.costs")]
    out: String,
    /// Write the measured cases as JSON to FILE (for --measured)
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Fit the cases of FILE (an earlier --json) instead of running real jobs
    #[arg(long, value_name = "FILE")]
    measured: Option<String>,
    /// The costs the fit starts from: fork, vm, ssh or a cost file
    #[arg(long, default_value = "vm")]
    start: String,
    /// Most rounds of the coordinate search
    #[arg(long, default_value_t = 40)]
    rounds: u32,
}

#[derive(clap::Args, Debug)]
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
    /// Workload: mpich-init, mpich5-init, exchange, fence, pmi2, pmgr, spawn, ompi5-init
    /// (Open MPI 5 over PMIx), or a .pmitrace file
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
    /// Cost model: fork (an agent per machine, fork-launcher figures), vm (every agent on
    /// this project's 2-core VM: the validated figures), ssh (LAN, the launch model's
    /// defaults), or a cost file (`name = value` lines, as `libi-sim calibrate` writes)
    #[arg(long, default_value = "fork")]
    costs: String,
    /// Override one cost: NAME=VALUE (seq, rem, slots, latency, bandwidth, cpu_msg,
    /// cpu_byte, cpu_pmi, cpu_send, loop_launch, fork, rank_start, rank_step, pmi_latency, rank_exit,
    /// kill_delay, cores, fe_start, jitter, pmix_hop, pmix_start)
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
    /// Refuse a run whose estimated memory is above SIZE (e.g. 8G, 512M) instead of above
    /// the machine's available memory (MemAvailable, or the room under the cgroup's limit)
    #[arg(long = "max-mem", value_name = "SIZE")]
    max_mem: Option<String>,
    /// Print each run's memory estimate and what it is made of instead of running it
    #[arg(long)]
    estimate: bool,
}

/// A cost preset, or a cost file (`--costs`, `calibrate --start`).
fn costs_named(name: &str, opt: &str) -> Result<Costs, String> {
    Ok(match name {
        "fork" => Costs::default(),
        "ssh" => Costs::ssh_lan(),
        "vm" => Costs::this_vm(),
        path if std::path::Path::new(path).exists() => {
            Costs::load(path).map_err(|e| e.to_string())?
        }
        c => return Err(format!("--{opt} '{c}': expected fork, vm, ssh or a cost file")),
    })
}

fn list<T>(s: &str, what: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',').map(|x| f(x.trim()).map_err(|e| format!("--{what} '{x}': {e}"))).collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match &cli.command {
        Some(Sub::Calibrate(c)) => calibrate(c),
        None => run(&cli.run),
    };
    match done {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("libi-sim: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Why a command failed: one line, printed after `libi-sim: error: `.
type Failure = Box<dyn std::error::Error>;

fn run(a: &Args) -> Result<u8, Failure> {
    let nodes = list(&a.nodes, "nodes", |x| {
        x.parse::<usize>()
            .ok()
            .filter(|n| (1..=10_000_000).contains(n))
            .ok_or("not a node count".into())
    })?;
    let ppns = list(&a.ppn, "ppn", |x| {
        x.parse::<u32>().ok().filter(|n| (1..=4096).contains(n)).ok_or("not a rank count".into())
    })?;
    let shapes = list(&a.tree, "tree", |x| x.parse::<Shape>().map_err(|e| e.to_string()))?;
    let pushes = list(&a.push_max, "kvs-push-max", |x| {
        libi::job::parse_bytes(x).map_err(|e| e.to_string())
    })?;
    let batches = list(&a.batch, "batch", |x| match x {
        "none" | "0" => Ok(None),
        b => b.parse::<u32>().map(Some).map_err(|_| "not a batch size".into()),
    })?;
    let mut costs = costs_named(&a.costs, "costs")?;
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
    let full = Trace::load(&a.workload)?;
    let trace = if a.skip_slice { full.clone().without_slices() } else { full.clone() };
    let mut runs = Vec::new();
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
                        runs.push(cfg);
                    }
                }
            }
        }
    }
    // Every run is checked before the first starts.
    let (limit, what) = match a.max_mem.as_deref() {
        Some(m) => {
            let b = libi::job::parse_bytes(m).map_err(|e| format!("--max-mem: {e}"))?;
            (Some(b), "--max-mem".to_string())
        }
        None => match memory::available() {
            Some((b, what)) => (Some(b), what),
            None => (None, String::new()),
        },
    };
    for cfg in &runs {
        if a.estimate {
            let e = memory::estimate(cfg)?;
            let parts: Vec<String> =
                e.parts.iter().map(|(w, b)| format!("{w} {}", memory::gib(*b))).collect();
            println!(
                "--nodes {} --ppn {} --tree {} --kvs-push-max {}: about {} ({})",
                cfg.nodes,
                cfg.ppn,
                cfg.shape,
                cfg.push_max,
                memory::gib(e.bytes),
                parts.join(", ")
            );
            continue;
        }
        if let Some(limit) = limit {
            let run =
                memory::Run { cfg, full: &full, skip_slice: a.skip_slice, workload: &a.workload };
            if let Some(line) = memory::refusal(&run, limit, &what)? {
                eprintln!("libi-sim: {line}");
                return Ok(2);
            }
        }
    }
    if a.estimate {
        return Ok(0);
    }
    let mut rows = Vec::new();
    let mut worst = 0u8;
    let mut runs_left = runs.len();
    for cfg in runs {
        let (push, batch) = (cfg.push_max, cfg.batch);
        let t0 = Instant::now();
        let cluster = Cluster::new(cfg)?;
        runs_left -= 1;
        let outcome = if runs_left == 0 { cluster.run_then_exit() } else { cluster.run() };
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

/// `libi-sim calibrate`: measure, fit, write the cost file, check on the held-out cases.
fn calibrate(a: &CalArgs) -> Result<u8, Failure> {
    use libi_sim::calibrate::{self as cal, Case, Setup};
    let counts = |s: &str, what: &str| -> Result<Vec<u32>, String> {
        if s == "none" {
            return Ok(Vec::new());
        }
        list(s, what, |x| {
            x.parse::<u32>().ok().filter(|n| (1..=4096).contains(n)).ok_or("not a count".into())
        })
    };
    let grid = |agents: &[u32], ppns: &[u32]| -> Vec<(u32, u32)> {
        agents.iter().flat_map(|&k| ppns.iter().map(move |&r| (k, r))).collect()
    };
    let fit_grid = grid(&counts(&a.fit_agents, "fit-agents")?, &counts(&a.fit_ppn, "fit-ppn")?);
    let check_grid =
        grid(&counts(&a.check_agents, "check-agents")?, &counts(&a.check_ppn, "check-ppn")?);
    if fit_grid.is_empty() {
        return Err("calibrate: no case to fit".into());
    }
    if a.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let setup = Setup {
        trace: Trace::load(&a.workload)?,
        shape: a.tree.parse::<Shape>().map_err(|e| format!("--tree '{}': {e}", a.tree))?,
        push_max: libi::job::parse_bytes(&a.push_max)
            .map_err(|e| format!("--kvs-push-max: {e}"))?,
    };
    if setup.trace.uses_pmix() {
        return Err(format!(
            "calibrate: the replay client speaks PMI, not PMIx: workload '{}' cannot be replayed",
            a.workload
        )
        .into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let (fit_cases, held): (Vec<Case>, Vec<Case>) = match &a.measured {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--measured {path}: {e}"))?;
            let doc: Measured =
                serde_json::from_str(&text).map_err(|e| format!("--measured {path}: {e}"))?;
            (doc.fit, doc.held_out)
        }
        None => {
            let measured = measure_here(a, &fit_grid, &check_grid)?;
            let split = fit_grid.len();
            (measured[..split].to_vec(), measured[split..].to_vec())
        }
    };
    if let Some(path) = &a.json {
        let doc = Measured {
            what: format!(
                "real fork-launcher runs of the PMI replay client ({}), {} tree, \
                 --kvs-push-max {}, medians of the runs, seconds from the front end's start",
                a.workload, a.tree, a.push_max
            ),
            cpus,
            fit: fit_cases.clone(),
            held_out: held.clone(),
        };
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    let mut start = costs_named(&a.start, "start")?;
    start.cores = cpus;
    start.loop_launch = true;
    let (fitted, loss) = cal::fit(&setup, &fit_cases, start, a.rounds, &mut |m| {
        eprintln!("libi-sim calibrate: {m}");
    })?;
    // Four significant digits: what the file says is what the table shows.
    let mut fitted = fitted;
    for name in cal::FITTED {
        if let Some((_, v)) = fitted.figures().into_iter().find(|(n, _)| n == name) {
            fitted.set(name, &format!("{v:.3e}"))?;
        }
    }
    let (text, worst) = cal::table(&setup, &fit_cases, &held, &fitted)?;
    let (_, start_worst) = cal::table(&setup, &fit_cases, &held, &start)?;
    let names = |cs: &[Case]| -> String {
        cs.iter().map(|c| format!("{}x{}", c.agents, c.ppn)).collect::<Vec<_>>().join(" ")
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let mut header = format!(
        "libi-sim cost file: written by `libi-sim calibrate` on {} ({cpus} CPUs)\n\
         real runs: libi-mpiexec -launcher fork, the PMI replay client of {}, {} tree, \
         --kvs-push-max {}\n\
         fitted to {} (loss {loss:.3}) from the {} costs\n",
        host.trim(),
        a.workload,
        a.tree,
        a.push_max,
        names(&fit_cases),
        a.start
    );
    if !held.is_empty() {
        header.push_str(&format!(
            "held out {}: largest error {worst:.0} % (the {} costs: {start_worst:.0} %)\n",
            names(&held),
            a.start
        ));
    }
    header.push_str("\nname = value: seconds, bytes per second, counts (see --cost)");
    std::fs::write(&a.out, fitted.to_file(&header))
        .map_err(|e| format!("cannot write {}: {e}", a.out))?;
    print!("{text}");
    if !held.is_empty() {
        println!(
            "held out: largest error {worst:.0} % with the fitted costs, {start_worst:.0} % \
             with the {} costs",
            a.start
        );
    }
    println!("wrote {} (use: libi-sim --costs {} ...)", a.out, a.out);
    Ok(0)
}

/// The measured cases of `calibrate --json` / `--measured`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Measured {
    what: String,
    cpus: u32,
    fit: Vec<libi_sim::calibrate::Case>,
    held_out: Vec<libi_sim::calibrate::Case>,
}

/// The real runs of `calibrate`: every case of `fit` then of `check`, `a.runs` each.
fn measure_here(
    a: &CalArgs,
    fit: &[(u32, u32)],
    check: &[(u32, u32)],
) -> Result<Vec<libi_sim::calibrate::Case>, String> {
    use libi_sim::calibrate as cal;
    let mpiexec = match &a.mpiexec {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| format!("where is libi-sim? {e}"))?
            .with_file_name("libi-mpiexec"),
    };
    if !mpiexec.is_file() {
        return Err(format!(
            "no libi-mpiexec at {} (build it: cargo build --release -p libi-mpiexec -p \
             libi-nla; or give --mpiexec PATH)",
            mpiexec.display()
        ));
    }
    let dir = std::env::temp_dir().join(format!("libi-sim-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let result = (|| {
        let replay = match &a.replay {
            Some(p) => std::path::PathBuf::from(p),
            None => cal::build_replay(&dir).map_err(|e| e.to_string())?,
        };
        let trace = match libi_sim::workload::BUILTIN.iter().find(|(n, _)| *n == a.workload) {
            Some((_, text)) => {
                let p = dir.join("workload.pmitrace");
                std::fs::write(&p, text)
                    .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
                p
            }
            None => std::path::PathBuf::from(&a.workload),
        };
        let programs = cal::Programs { mpiexec: mpiexec.clone(), replay, trace };
        let report = dir.join("report.json");
        let mut cases = Vec::new();
        for &(k, r) in fit.iter().chain(check) {
            let mut runs = Vec::new();
            for i in 1..=a.runs {
                let got = cal::real_run(&programs, &a.tree, &a.push_max, k, r, &report)
                    .map_err(|e| e.to_string())?;
                eprintln!(
                    "libi-sim calibrate: {k} x {r}, run {i}/{}: launch {:.4} s, fence1 {:.4} s, \
                     total {:.4} s",
                    a.runs, got[0], got[1], got[2]
                );
                runs.push(got);
            }
            cases.push(cal::case_of(k, r, &runs));
        }
        Ok(cases)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
