//! `libi-nla`: the Node Launch Agent. Started by a launcher (fork, ssh, ...) as
//! `libi-nla --parent HOST:PORT --node ID`; the job secret arrives as the first line of stdin.

use clap::Parser;
use std::io::BufRead;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "libi-nla", version, about = "libi Node Launch Agent (started by libi-mpiexec)")]
struct Args {
    /// Address of the parent (front end or NLA) to connect back to.
    #[arg(long, required_unless_present = "rendezvous", requires = "node")]
    parent: Option<String>,
    /// This NLA's node id in the launch tree.
    #[arg(long)]
    node: Option<u32>,
    /// Started by a resource manager's step: join the front end at this address, which says
    /// where the parent is.
    #[arg(long, conflicts_with = "parent")]
    rendezvous: Option<String>,
    /// With --rendezvous: this node's name in the job's host list (default: Slurm's
    /// SLURMD_NODENAME, else the host name).
    #[arg(long, requires = "rendezvous")]
    host: Option<String>,
    /// Verbose tracing on stderr.
    #[arg(short, long)]
    verbose: bool,
    /// Stdin stays open for the job (after the secret line): EOF means the launcher
    /// connection (ssh session, parent process) is gone, and the NLA tears its ranks down.
    #[arg(long)]
    keep_stdin: bool,
    /// Started by this parent process itself (the fork launcher): die with it.
    #[arg(long)]
    parent_pid: Option<u32>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(ppid) = args.parent_pid {
        if !libi_node::tree::die_with_parent(ppid) {
            eprintln!("libi-nla: parent process {ppid} is gone");
            return ExitCode::from(1);
        }
    }
    libi_node::init_tracing(args.verbose);
    libi_node::tune_allocator();
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
    libi_node::driver::raise_fd_limit();
    let parent = match (args.parent, args.node, args.rendezvous) {
        (Some(addr), Some(node), _) => libi_node::driver::Parent::Direct { addr, node },
        (_, _, Some(front_end)) => {
            libi_node::driver::Parent::Rendezvous { front_end, host: args.host }
        }
        _ => {
            eprintln!("libi-nla: give --parent ADDR --node ID or --rendezvous ADDR");
            return ExitCode::from(2);
        }
    };
    let who = args.node.map(|n| format!("node {n}")).unwrap_or_else(|| "joining NLA".into());
    match rt.block_on(libi_node::driver::run(parent, secret, args.keep_stdin)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("libi-nla: {who}: {e}");
            ExitCode::from(1)
        }
    }
}
