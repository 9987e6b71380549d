//! `libi-mpiexec`: start a parallel job through libi's Node Launch Agents. Hydra-compatible
//! options; see `libi-mpiexec --help`.

mod cli;
mod frontend;
mod plan;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cl = match cli::parse(&argv) {
        Ok(c) => c,
        Err(cli::CliError::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(cli::CliError::Usage(m)) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    init_tracing(cl.global.verbose);
    let timeout = match std::env::var("MPIEXEC_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(0) => None,
            Ok(s) => Some(Duration::from_secs(s)),
            Err(_) => {
                eprintln!("libi-mpiexec: MPIEXEC_TIMEOUT must be a number of seconds, got '{v}'");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let nla_path = match cl.global.nla_path.clone().or_else(|| std::env::var("LIBI_NLA").ok()) {
        Some(p) => p,
        None => match std::env::current_exe() {
            Ok(p) => p.with_file_name("libi-nla").to_string_lossy().into_owned(),
            Err(_) => "libi-nla".into(),
        },
    };
    let ctx = plan::Context {
        inherited: std::env::vars().collect(),
        cwd: std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
        default_n: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        kvsname: format!("kvs_{}_0", std::process::id()),
        kill_grace_ms: 3000,
    };
    let plan = plan::plan(&cl, &ctx);
    let opts = frontend::Options {
        label: cl.global.label,
        verbose: cl.global.verbose,
        nla_path,
        timeout,
        grace: Duration::from_millis(ctx.kill_grace_ms),
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("libi-mpiexec: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let status = rt.block_on(frontend::run(plan, opts));
    // Do not wait for the stdin thread.
    std::process::exit(status & 0xff);
}

fn init_tracing(verbose: bool) {
    let filter = if verbose { "debug" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIBI_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .init();
}
