//! `libi-nla`: the Node Launch Agent. Started by a launcher (fork, ssh, ...) as
//! `libi-nla --parent HOST:PORT --node ID`; the job secret arrives as the first line of stdin.

use clap::Parser;
use std::io::BufRead;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "libi-nla", version, about = "libi Node Launch Agent (started by libi-mpiexec)")]
struct Args {
    /// Address of the parent (front end or NLA) to connect back to.
    #[arg(long)]
    parent: String,
    /// This NLA's node id in the launch tree.
    #[arg(long)]
    node: u32,
    /// Verbose tracing on stderr.
    #[arg(short, long)]
    verbose: bool,
    /// Stdin stays open for the job (after the secret line): EOF means the launcher
    /// connection (ssh session, parent process) is gone, and the NLA tears its ranks down.
    #[arg(long)]
    keep_stdin: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = if args.verbose { "debug" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIBI_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .init();
    let mut secret = String::new();
    if std::io::stdin().lock().read_line(&mut secret).is_err() || secret.trim().is_empty() {
        eprintln!("libi-nla: no job secret on stdin (libi-nla is started by libi-mpiexec)");
        return ExitCode::from(2);
    }
    let secret = secret.trim().to_string();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("libi-nla: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    nla::driver::raise_fd_limit();
    match rt.block_on(nla::driver::run(&args.parent, args.node, secret, args.keep_stdin)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("libi-nla: node {}: {e}", args.node);
            ExitCode::from(1)
        }
    }
}
